// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package garbagecollection

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// listedFamily is a family whose inventory lists what the test says and records deletions.
type listedFamily struct {
	name     string
	machines []family.Machine
	deleted  []string
	scopes   []family.Scope
}

func (f *listedFamily) Name() string { return f.name }

func (f *listedFamily) List(_ context.Context, s family.Scope) ([]family.Machine, error) {
	f.scopes = append(f.scopes, s)
	return f.machines, nil
}

func (f *listedFamily) Delete(_ context.Context, _ family.Scope, m family.Machine) error {
	f.deleted = append(f.deleted, m.Name)
	f.machines = slices.DeleteFunc(slices.Clone(f.machines), func(l family.Machine) bool { return l.ID == m.ID })
	return nil
}

// stateSecret is a claim's state Secret as the kubernetes backend writes it for the
// fulfiller: the backend's labels and the claim's UID (the backend's labels setting).
func stateSecret(namespace, claim string, created time.Time) *corev1.Secret {
	s := foreignStateSecret(namespace, claim, created)
	s.Labels[keys.LabelNodeClaimUID] = "uid-" + claim
	return s
}

// foreignStateSecret is a state Secret another tool's OpenTofu wrote to the same namespace:
// the backend's labels only.
func foreignStateSecret(namespace, suffix string, created time.Time) *corev1.Secret {
	key, _ := statelock.KeyFor(suffix)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: key.SecretName(), CreationTimestamp: metav1.Time{Time: created},
		Labels: map[string]string{labelTFState: "true", labelTFWorkspace: statelock.Workspace, labelTFStateSuffix: suffix, "app.kubernetes.io/managed-by": "terraform"}}}
}

// TestMachineCollector: a listed machine is deleted, with an event naming it and the scope of
// its class, only when it carries this cluster's label and a claim, is older than the grace
// period, and its claim has no NodeClaim, Fulfillment or state; a state Secret is removed
// when its Fulfillment is gone, it is old enough and no machine of its claim is listed, and
// kept in a namespace where some class has no inventory; a state without the fulfiller's
// claim label (another tool's, in a shared namespace) is never removed (issue 25, defect 8);
// without a cluster name nothing is touched.
func TestMachineCollector(t *testing.T) {
	now := time.Now()
	old, young := now.Add(-time.Hour), now.Add(-time.Minute)
	machine := func(name, cluster, claim string, created time.Time) family.Machine {
		return family.Machine{ID: "id-" + name, Name: name, Cluster: cluster, Claim: claim, Class: "c", Created: created}
	}
	machines := []family.Machine{
		machine("orphan", "prod-eu", "gone", old),
		machine("claimed", "prod-eu", "has-claim", old),
		machine("fulfilled", "prod-eu", "has-fulfillment", old),
		machine("stated", "prod-eu", "has-state", old),
		machine("young", "prod-eu", "gone-young", young),
		machine("foreign", "staging", "gone-foreign", old),
		machine("unlabelled", "", "gone-unlabelled", old),
		machine("no-claim", "prod-eu", "", old),
	}
	for _, tc := range []struct {
		name           string
		cluster        string
		genericClass   bool // another class, without an inventory, keeps states in the same namespace
		deleted        []string
		statesRemoved  []string
		eventsMentions string
	}{
		{name: "collects", cluster: "prod-eu", deleted: []string{"orphan"}, statesRemoved: []string{"orphan-state"}, eventsMentions: "orphan"},
		{name: "no proof for states", cluster: "prod-eu", genericClass: true, deleted: []string{"orphan"}, eventsMentions: "orphan"},
		{name: "no cluster name", cluster: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fam := &listedFamily{name: "listed", machines: machines}
			registry, err := family.NewRegistry(fam)
			if err != nil {
				t.Fatal(err)
			}
			nc := test.TwoTypeClass()
			nc.Spec.Family = "listed"
			nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "cloud"}}
			nc.Spec.Backend.Namespace = "states"
			objects := []client.Object{nc,
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "cloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, Data: map[string][]byte{"TOKEN": []byte("t0ken")}},
				&karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "has-claim"}},
				&v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: "has-fulfillment"}},
				stateSecret("states", "has-state", old),    // its machine is listed: kept
				stateSecret("states", "orphan-state", old), // no Fulfillment, no machine: removed
				stateSecret("states", "young-state", young),
				stateSecret("states", "has-fulfillment", old),
				foreignStateSecret("states", "other-tool", old), // not the fulfiller's: kept
			}
			if tc.genericClass {
				generic := test.TwoTypeClass()
				generic.Name, generic.UID = "generic", "u2"
				objects = append(objects, generic)
			}
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects...).Build()
			rec := &test.Recorder{}
			clk := clocktesting.NewFakeClock(now)
			o := NewMachineCollector(MachineOptions{Kube: kube, APIReader: kube, Clock: clk, Recorder: rec, Families: registry, Cluster: tc.cluster,
				Namespace: "fulfiller", StateNamespace: "states", Grace: 10 * time.Minute, Interval: time.Minute})
			if err := o.Collect(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(fam.deleted, tc.deleted) {
				t.Errorf("deleted %v, want %v", fam.deleted, tc.deleted)
			}
			for _, s := range fam.scopes {
				if s.Cluster != "prod-eu" || s.Env["TOKEN"] != "t0ken" || s.Class.Name != "c" {
					t.Errorf("listed with scope cluster %q, class %s", s.Cluster, s.Class.Name)
				}
			}
			if len(rec.Events()) != len(tc.deleted) {
				t.Errorf("%d events for %d deletions", len(rec.Events()), len(tc.deleted))
			}
			for _, e := range rec.Events() {
				if e.Reason != v1alpha1.ReasonOrphanMachineDeleted || !strings.Contains(e.Message, tc.eventsMentions) {
					t.Errorf("event %s %q", e.Reason, e.Message)
				}
			}
			for _, claim := range []string{"has-state", "orphan-state", "young-state", "has-fulfillment", "other-tool"} {
				key, _ := statelock.KeyFor(claim)
				exists, err := statelock.Exists(context.Background(), kube, "states", key)
				if err != nil {
					t.Fatal(err)
				}
				if removed := slices.Contains(tc.statesRemoved, claim); exists == removed {
					t.Errorf("state of %s exists=%v, want removed=%v", claim, exists, removed)
				}
			}
		})
	}
}

// TestMachineCollectorDeletesOrphansNodes: a collected machine that had joined leaves its Node
// behind (nothing else removes it without a cloud-controller-manager): the collector deletes
// it, also when the machine's kubelet registers it again while it stops; never a Node whose
// provider ID a NodeClaim holds, another machine's Node, or one registered after the watch.
func TestMachineCollectorDeletesOrphansNodes(t *testing.T) {
	now := time.Now()
	fam := &listedFamily{name: "listed", machines: []family.Machine{
		{ID: "id-orphan", Name: "orphan", ProviderID: "listed://orphan", Cluster: "prod-eu", Claim: "gone", Class: "c", Created: now.Add(-time.Hour)},
	}}
	registry, err := family.NewRegistry(fam)
	if err != nil {
		t.Fatal(err)
	}
	nc := test.TwoTypeClass()
	nc.Spec.Family = "listed"
	node := func(name, providerID string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, node("orphan", "listed://orphan"), node("other", "listed://other")).Build()
	clk := clocktesting.NewFakeClock(now)
	o := NewMachineCollector(MachineOptions{Kube: kube, APIReader: kube, Clock: clk, Recorder: &test.Recorder{}, Families: registry, Cluster: "prod-eu",
		Namespace: "fulfiller", StateNamespace: "states", Grace: 10 * time.Minute, Interval: time.Minute})
	ctx := context.Background()
	nodes := func() []string {
		list := &corev1.NodeList{}
		if err := kube.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range list.Items {
			names = append(names, n.Name)
		}
		slices.Sort(names)
		return names
	}
	collect := func(want ...string) {
		t.Helper()
		if err := o.Collect(ctx); err != nil {
			t.Fatal(err)
		}
		if got := nodes(); !slices.Equal(got, want) {
			t.Errorf("nodes %v, want %v", got, want)
		}
	}
	before := testutil.ToFloat64(orphansDeleted.WithLabelValues("node", "listed"))

	collect("other") // the machine and its Node
	if !slices.Equal(fam.deleted, []string{"orphan"}) {
		t.Fatalf("deleted %v, want the orphan", fam.deleted)
	}
	test.ExpectApplied(t, kube, node("orphan", "listed://orphan")) // registered again while it stops
	clk.Step(time.Minute)
	collect("other")
	if n := testutil.ToFloat64(orphansDeleted.WithLabelValues("node", "listed")) - before; n != 2 {
		t.Errorf("%v nodes counted, want 2", n)
	}

	// A NodeClaim that holds the provider ID keeps the Node.
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Status: karpv1.NodeClaimStatus{ProviderID: "listed://orphan"}}
	test.ExpectApplied(t, kube, claim, node("orphan", "listed://orphan"))
	collect("orphan", "other")
	if err := kube.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	// After the watch, a Node of that provider ID is no longer the collector's.
	clk.Step(orphanNodeWatch)
	collect("orphan", "other")
}

// accountFamily is a listedFamily whose inventory names the account a scope lists: its
// token.
type accountFamily struct{ *listedFamily }

func (accountFamily) MachinesAccount(s family.Scope) string { return s.Env["TOKEN"] }

// TestMachineCollectorListsEachAccountOnce (issue 25, defect 7): classes whose credentials
// reach the same account (a Hetzner Cloud project) share one listing per pass, where each
// class listed every server of the cluster again; a class with other credentials is listed
// on its own.
func TestMachineCollectorListsEachAccountOnce(t *testing.T) {
	now := time.Now()
	fam := &listedFamily{name: "listed", machines: []family.Machine{
		{ID: "id-1", Name: "m1", Cluster: "prod-eu", Claim: "live", Class: "a", Created: now.Add(-time.Hour)},
	}}
	registry, err := family.NewRegistry(accountFamily{fam})
	if err != nil {
		t.Fatal(err)
	}
	objects := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "project-1", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, Data: map[string][]byte{"TOKEN": []byte("one")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "project-2", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, Data: map[string][]byte{"TOKEN": []byte("two")}},
		&karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "live"}},
	}
	for i, secret := range []string{"project-1", "project-1", "project-1", "project-2"} {
		nc := test.TwoTypeClass()
		nc.Name, nc.UID = fmt.Sprintf("class-%d", i), types.UID(fmt.Sprintf("u%d", i))
		nc.Spec.Family = "listed"
		nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: secret}}
		objects = append(objects, nc)
	}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects...).Build()
	o := NewMachineCollector(MachineOptions{Kube: kube, APIReader: kube, Clock: clocktesting.NewFakeClock(now), Recorder: &test.Recorder{},
		Families: registry, Cluster: "prod-eu", Namespace: "fulfiller", StateNamespace: "states", Grace: 10 * time.Minute, Interval: time.Minute})
	if err := o.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for _, s := range fam.scopes {
		tokens = append(tokens, s.Env["TOKEN"])
	}
	slices.Sort(tokens)
	if !slices.Equal(tokens, []string{"one", "two"}) {
		t.Errorf("listed with tokens %v, want each project once", tokens)
	}
	if len(fam.deleted) != 0 {
		t.Errorf("deleted %v", fam.deleted)
	}
}

// TestCollectInterval: a pass a fifth of the grace, at least a minute; a collector without
// an interval takes its grace's.
func TestCollectInterval(t *testing.T) {
	for grace, want := range map[time.Duration]time.Duration{
		DefaultOrphanGrace: 2 * time.Minute,
		time.Minute:        time.Minute,
		3 * time.Minute:    time.Minute,
		time.Hour:          12 * time.Minute,
	} {
		if got := CollectInterval(grace); got != want {
			t.Errorf("CollectInterval(%s) = %s, want %s", grace, got, want)
		}
	}
	for _, tc := range []struct{ grace, interval, want time.Duration }{
		{0, 0, 2 * time.Minute},
		{time.Minute, 0, time.Minute},
		{DefaultOrphanGrace, 30 * time.Second, 30 * time.Second},
	} {
		o := NewMachineCollector(MachineOptions{Grace: tc.grace, Interval: tc.interval})
		if o.interval != tc.want {
			t.Errorf("a collector of grace %s and interval %s makes a pass every %s, want %s", tc.grace, tc.interval, o.interval, tc.want)
		}
	}
}
