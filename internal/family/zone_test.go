// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package family_test

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/fulfiller-sh/fulfiller/internal/family"
)

type zoned struct {
	name   string
	labels []string
}

func (z zoned) Name() string         { return z.name }
func (z zoned) ZoneLabels() []string { return z.labels }

type plain struct{}

func (plain) Name() string { return "plain" }

// restoreNormalizedLabels puts Karpenter's NormalizedLabels back as they were after the test.
func restoreNormalizedLabels(t *testing.T) {
	saved := maps.Clone(karpv1.NormalizedLabels)
	t.Cleanup(func() {
		maps.DeleteFunc(karpv1.NormalizedLabels, func(string, string) bool { return true })
		maps.Copy(karpv1.NormalizedLabels, saved)
	})
}

// Once registered, Karpenter plans a requirement on a family's zone label (a volume's node
// affinity on its CSI driver's topology key) as one on topology.kubernetes.io/zone, keeping
// its values; a Node of the family carries the label valued with its zone.
func TestNormalizeZoneLabels(t *testing.T) {
	restoreNormalizedLabels(t)
	r, err := family.NewRegistry(zoned{"cloud", []string{"csi.example.com/location"}}, plain{})
	if err != nil {
		t.Fatal(err)
	}
	if req := scheduling.NewRequirement("csi.example.com/location", corev1.NodeSelectorOpIn, "nbg1"); req.Key == corev1.LabelTopologyZone {
		t.Fatal("Karpenter normalizes the label before it is registered")
	}
	if err := r.NormalizeZoneLabels(); err != nil {
		t.Fatal(err)
	}
	req := scheduling.NewRequirement("csi.example.com/location", corev1.NodeSelectorOpIn, "nbg1")
	if req.Key != corev1.LabelTopologyZone || !req.Has("nbg1") || req.Has("fsn1") {
		t.Errorf("registered, the requirement is %s, want topology.kubernetes.io/zone In [nbg1]", req)
	}
	if got := r.NodeZoneLabels("cloud", "nbg1"); len(got) != 1 || got["csi.example.com/location"] != "nbg1" {
		t.Errorf("a Node of family cloud in nbg1 carries %v, want csi.example.com/location=nbg1", got)
	}
	for _, name := range []string{"plain", "", "unknown"} {
		if got := r.NodeZoneLabels(name, "nbg1"); len(got) != 0 {
			t.Errorf("a Node of family %q carries zone labels %v, want none", name, got)
		}
	}
}

// A label Karpenter already reads as another key cannot also be the zone.
func TestNormalizeZoneLabelsConflict(t *testing.T) {
	restoreNormalizedLabels(t)
	r, err := family.NewRegistry(zoned{"cloud", []string{"beta.kubernetes.io/arch"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.NormalizeZoneLabels(); err == nil {
		t.Fatal("a family's zone label that Karpenter reads as the architecture was accepted")
	}
	if karpv1.NormalizedLabels["beta.kubernetes.io/arch"] != corev1.LabelArchStable {
		t.Errorf("the refused label now normalizes to %s", karpv1.NormalizedLabels["beta.kubernetes.io/arch"])
	}
}
