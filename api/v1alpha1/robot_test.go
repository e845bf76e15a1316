// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// TestRobotDiscoverNeedsSelector (issue 25, defect 2): the API server refuses a robot class
// whose discover entry has neither namePrefix nor product, also when the field it has is
// misspelt (the API server drops unknown fields, which leaves the entry without a
// selector): such an entry would take every server of the Robot account into the pool.
func TestRobotDiscoverNeedsSelector(t *testing.T) {
	ctx := context.Background()
	kube := apiServer(t)
	nodeType, err := json.Marshal(v1alpha1.NodeType{Name: "ax41",
		Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi")},
		Offerings: []v1alpha1.Offering{{Zone: "fsn1", Price: "0.06"}}})
	if err != nil {
		t.Fatal(err)
	}
	var nt map[string]any
	if err := json.Unmarshal(nodeType, &nt); err != nil {
		t.Fatal(err)
	}
	const refused = "a discover entry needs namePrefix or product"
	for _, tc := range []struct {
		name  string
		entry map[string]any
		want  string // in the refusal; empty: accepted
	}{
		{name: "name prefix", entry: map[string]any{"namePrefix": "k8s-", "nodeType": "ax41"}},
		{name: "product", entry: map[string]any{"product": "AX41", "nodeType": "ax41"}},
		{name: "both", entry: map[string]any{"namePrefix": "k8s-", "product": "AX41", "nodeType": "ax41"}},
		{name: "neither", entry: map[string]any{"nodeType": "ax41"}, want: refused},
		{name: "empty", entry: map[string]any{"namePrefix": "", "product": "", "nodeType": "ax41"}, want: refused},
		{name: "misspelt", entry: map[string]any{"namePrefx": "k8s-", "nodeType": "ax41"}, want: refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Written as a user writes it, so that a misspelt field reaches the API server.
			nc := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.SchemeGroupVersion.String(),
				"kind":       "TofuNodeClass",
				"metadata":   map[string]any{"name": "robot-" + strings.ReplaceAll(tc.name, " ", "-")},
				"spec": map[string]any{
					"family":    v1alpha1.FamilyRobot,
					"module":    map[string]any{"source": "/m"},
					"bootstrap": map[string]any{"apiServerEndpoint": "127.0.0.1:6443"},
					"robot":     map[string]any{"discover": []any{tc.entry}},
					"nodeTypes": []any{nt},
				},
			}}
			err := kube.Create(ctx, nc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("create = %v, want a refusal with %q", err, tc.want)
			}
		})
	}
	// The controller's own check, for a CRD older than the rule.
	pool := &v1alpha1.RobotPool{Discover: []v1alpha1.RobotDiscovery{{NamePrefix: "k8s-", NodeType: "ax41"}, {NodeType: "ax41"}}}
	if errs := pool.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "robot.discover[1]") {
		t.Errorf("Validate() = %v, want robot.discover[1] named", errs)
	}
}
