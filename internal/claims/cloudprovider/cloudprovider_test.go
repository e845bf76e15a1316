// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package cloudprovider

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// expectCreateError checks that err is a CreateError with the condition reason.
func expectCreateError(t *testing.T, err error, reason string) {
	t.Helper()
	var ce *cloudprovider.CreateError
	if !errors.As(err, &ce) || ce.ConditionReason != reason {
		t.Errorf("error %v, want a CreateError %s", err, reason)
	}
}

// TestCreate: Create decides once and records it; what it cannot decide is an error of the
// kind Karpenter acts on.
func TestCreate(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e *env, claim *karpv1.NodeClaim)
	}{
		{"records the cheapest offering and returns the claim as it will be", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			nc := test.NodeClass("sim", func(nc *v1alpha1.TofuNodeClass) {
				nc.Spec.NodeTypes[0].Offerings = []v1alpha1.Offering{{Zone: "a", Price: "0.02"}, {Zone: "b", Price: "0.01"}}
				nc.Spec.NodeTypes[0].Architecture = "arm64"
			})
			test.Ready(nc)
			test.ExpectApplied(t, e.kube, nc)
			got := e.create(claim)
			want := map[string]string{corev1.LabelInstanceTypeStable: "small", corev1.LabelTopologyZone: "b", karpv1.CapacityTypeLabelKey: "on-demand",
				corev1.LabelArchStable: "arm64", corev1.LabelOSStable: "linux"}
			for k, v := range want {
				if got.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, got.Labels[k], v)
				}
			}
			if got.Status.ProviderID != "fake://"+claim.Name || got.Annotations[AnnotationHash] == "" || got.Status.Allocatable.Cpu().IsZero() {
				t.Errorf("claim %+v", got)
			}
			f := e.fulfillment(claim.Name)
			if f.Spec.NodeType != "small" || f.Spec.Zone != "b" || f.Spec.Price != "0.01" || f.Spec.NodeClaimUID != string(claim.UID) ||
				f.Spec.Hash != got.Annotations[AnnotationHash] || f.Spec.ProviderID != got.Status.ProviderID {
				t.Errorf("fulfillment spec %+v", f.Spec)
			}
			// A second Create (a restarted Karpenter) gets the same answer and records nothing new.
			again := e.create(claim)
			if again.Status.ProviderID != got.Status.ProviderID || again.Labels[corev1.LabelTopologyZone] != "b" {
				t.Errorf("second create %+v", again)
			}
			list := &v1alpha1.FulfillmentList{}
			if err := e.kube.List(e.ctx, list); err != nil || len(list.Items) != 1 {
				t.Errorf("%d fulfillments (%v)", len(list.Items), err)
			}
		}},
		{"records the module as the class resolved it", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			source := "git::https://git.example.com/modules.git//sim?ref=v1"
			pinned := "git::https://git.example.com/modules.git//sim?ref=0123456789abcdef0123456789abcdef01234567"
			nc := test.NodeClass("sim", func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Source = source })
			test.Ready(nc)
			nc.Status.Modules = []v1alpha1.ModuleStatus{{Source: source, Pinned: pinned, Commit: "0123456789abcdef0123456789abcdef01234567", Digest: "sha256:abc"}}
			test.ExpectApplied(t, e.kube, nc)
			e.create(claim)
			if f := e.fulfillment(claim.Name); f.Spec.Module != pinned || f.Spec.ModuleDigest != "sha256:abc" {
				t.Errorf("fulfillment records module %q digest %q, want %q and the digest", f.Spec.Module, f.Spec.ModuleDigest, pinned)
			}
		}},
		{"a remote module the class has not resolved launches nothing", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			nc := test.NodeClass("sim", func(nc *v1alpha1.TofuNodeClass) {
				nc.Spec.Module.Source = "git::https://git.example.com/modules.git?ref=v1"
			})
			test.Ready(nc)
			test.ExpectApplied(t, e.kube, nc)
			if _, err := e.provider.Create(e.ctx, claim); !cloudprovider.IsNodeClassNotReadyError(err) {
				t.Errorf("Create = %v, want NodeClassNotReady", err)
			}
		}},
		{"a class that does not exist or is not Ready launches nothing", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			claim.Spec.NodeClassRef.Name = "nope"
			if _, err := e.provider.Create(e.ctx, claim); !cloudprovider.IsNodeClassNotReadyError(err) {
				t.Errorf("class missing: %v", err)
			}
			broken := test.NodeClass("broken")
			broken.StatusConditions().SetFalse(v1alpha1.ConditionModuleValid, v1alpha1.ReasonModuleNotFound, "gone")
			test.ExpectApplied(t, e.kube, broken)
			claim.Spec.NodeClassRef.Name = "broken"
			if _, err := e.provider.Create(e.ctx, claim); !cloudprovider.IsNodeClassNotReadyError(err) {
				t.Errorf("class not ready: %v", err)
			}
			test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim.Name}})
		}},
		// Karpenter deletes a claim on NodeClassNotReady: while the class's checks have not
		// answered yet (a class applied together with its NodePool), Create is retried.
		{"a class whose readiness is not known yet is retried, not refused", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			fresh := test.NodeClass("fresh")
			test.ExpectApplied(t, e.kube, fresh)
			checking := test.NodeClass("checking")
			test.Ready(checking)
			checking.StatusConditions().SetUnknownWithReason(status.ConditionReady, "Checking", "checking the module")
			test.ExpectApplied(t, e.kube, checking)
			for _, class := range []string{"fresh", "checking"} {
				claim.Spec.NodeClassRef.Name = class
				_, err := e.provider.Create(e.ctx, claim)
				expectCreateError(t, err, v1alpha1.ReasonNodeClassReadinessUnknown)
				if cloudprovider.IsNodeClassNotReadyError(err) {
					t.Errorf("class %s: NodeClassNotReady makes Karpenter delete the claim", class)
				}
			}
			test.ExpectNotFound(t, e.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: claim.Name}})
		}},
		// Once decided, a claim's answer does not depend on its class's readiness: a class that
		// flips to not Ready while the apply runs does not get the claim deleted.
		{"a claim already decided is answered whatever its class's readiness", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			first := e.create(claim)
			for _, set := range []func(status.ConditionSet){
				func(c status.ConditionSet) {
					c.SetFalse(v1alpha1.ConditionBackendReady, v1alpha1.ReasonEncryptionKeyMissing, "gone")
				},
				func(c status.ConditionSet) { c.SetUnknownWithReason(status.ConditionReady, "Checking", "checking") },
			} {
				nc := test.ExpectExists(t, e.kube, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"}})
				set(nc.StatusConditions())
				test.ExpectApplied(t, e.kube, nc)
				got, err := e.provider.Create(e.ctx, claim)
				if err != nil || got.Status.ProviderID != first.Status.ProviderID {
					t.Errorf("create of a decided claim, class %+v: %v", nc.StatusConditions().Root(), err)
				}
			}
		}},
		{"no launchable offering is insufficient capacity", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			e.unavailable.MarkUnavailable("small", "a", karpv1.CapacityTypeOnDemand)
			if _, err := e.provider.Create(e.ctx, claim); !cloudprovider.IsInsufficientCapacityError(err) {
				t.Errorf("create: %v, want insufficient capacity", err)
			}
		}},
		{"a name an earlier claim's Fulfillment still has is a conflict", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			test.ExpectApplied(t, e.kube, test.Fulfillment(claim, e.clock.Now(), func(f *v1alpha1.Fulfillment) { f.Spec.NodeClaimUID = "uid-earlier" }))
			_, err := e.provider.Create(e.ctx, claim)
			expectCreateError(t, err, v1alpha1.ReasonFulfillmentConflict)
		}},
		{"a node type gone from the class since the decision", func(t *testing.T, e *env, claim *karpv1.NodeClaim) {
			test.ExpectApplied(t, e.kube, test.Fulfillment(claim, e.clock.Now(), func(f *v1alpha1.Fulfillment) { f.Spec.NodeType = "retired" }))
			_, err := e.provider.Create(e.ctx, claim)
			expectCreateError(t, err, v1alpha1.ReasonNodeTypeNotFound)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.run(t, e, test.NodeClaim("sim-x7k2q", "sim", e.clock.Now()))
		})
	}
}

// TestGetListDelete: Get and List answer from the Fulfillments, for every machine that may
// exist; Delete starts the destroy and says NotFound once the machine is gone.
func TestGetListDelete(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	running := test.Fulfillment(test.NodeClaim("sim-run", "sim", now), now)
	applying := test.Fulfillment(test.NodeClaim("sim-new", "sim", now), now, func(f *v1alpha1.Fulfillment) { f.Spec.ProviderID = "" })
	destroyed := test.Fulfillment(test.NodeClaim("sim-gone", "sim", now), now, func(f *v1alpha1.Fulfillment) {
		f.StatusConditions().SetTrue(v1alpha1.ConditionDestroyed)
	})
	test.ExpectApplied(t, e.kube, running, applying, destroyed)

	got, err := e.provider.Get(e.ctx, "fake://sim-run")
	if err != nil || got.Name != "sim-run" || got.Labels[corev1.LabelInstanceTypeStable] != "small" {
		t.Errorf("get: %+v, %v", got, err)
	}
	for _, id := range []string{"fake://sim-gone", "fake://nope"} {
		if _, err := e.provider.Get(e.ctx, id); !cloudprovider.IsNodeClaimNotFoundError(err) {
			t.Errorf("get %s: %v, want NotFound", id, err)
		}
	}
	list, err := e.provider.List(e.ctx)
	if err != nil || len(list) != 1 || list[0].Status.ProviderID != "fake://sim-run" {
		t.Errorf("list: %+v, %v", list, err)
	}

	claim := test.NodeClaim("sim-run", "sim", now)
	if err := e.provider.Delete(e.ctx, claim); err != nil {
		t.Fatal(err)
	}
	test.ExpectDeleting(t, e.kube, running)
	if err := e.provider.Delete(e.ctx, test.NodeClaim("sim-none", "sim", now)); !cloudprovider.IsNodeClaimNotFoundError(err) {
		t.Errorf("delete of a claim without a Fulfillment: %v", err)
	}
}

// TestIsDrifted: a claim drifts when what its node was made from changes, not when offerings,
// deadlines or the backend's Secrets and encryption do, and not across hash versions; the
// reason names what changed.
func TestIsDrifted(t *testing.T) {
	e := newEnv(t)
	claim := e.create(test.NodeClaim("sim-x7k2q", "sim", e.clock.Now()))
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.TofuNodeClass)
		claim  func(*karpv1.NodeClaim)
		want   cloudprovider.DriftReason
	}{
		{name: "unchanged"},
		{name: "a price", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.NodeTypes[0].Offerings[0].Price = "0.5" }},
		{name: "a deadline", change: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.NodeTypes[0].Deadlines.Apply = &metav1.Duration{Duration: time.Minute}
		}},
		// A Secret reference, encryption on or off: claims keep the backend they recorded.
		{name: "the encryption key's Secret", change: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend.Encryption = &v1alpha1.BackendEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "new-key", Key: "passphrase"}}
		}},
		{name: "the pg connection's Secret", change: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Backend.PG = &v1alpha1.PGBackendSpec{ConnSecretRef: v1alpha1.SecretKeyRef{Name: "renamed", Key: "url"}}
		}},
		{name: "the token's lifetime", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Bootstrap.TokenTTL = metav1.Duration{Duration: time.Hour} }},
		{name: "a variable", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Variables = map[string]string{"image": "ubuntu-26.04"} }, want: "VariablesDrifted"},
		{name: "the module version", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Version = "2" }, want: "ModuleDrifted"},
		{name: "the module version and the endpoint", change: func(nc *v1alpha1.TofuNodeClass) {
			nc.Spec.Module.Version = "2"
			nc.Spec.Bootstrap.APIServerEndpoint = "10.0.0.9:6443"
		}, want: "ModuleDrifted,BootstrapDrifted"},
		{name: "a claim created without the hash's parts", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Version = "2" },
			claim: func(c *karpv1.NodeClaim) { delete(c.Annotations, AnnotationHashParts) }, want: ReasonNodeClassDrifted},
		{name: "an older hash version", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Version = "2" },
			claim: func(c *karpv1.NodeClaim) { c.Annotations[AnnotationHashVersion] = "v0" }},
		{name: "its node type gone (Karpenter reports it)", change: func(nc *v1alpha1.TofuNodeClass) { nc.Spec.NodeTypes[0].Name = "medium" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := test.ExpectExists(t, e.kube, &v1alpha1.TofuNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim"}})
			orig := nc.DeepCopy()
			if tc.change != nil {
				tc.change(nc)
				test.ExpectApplied(t, e.kube, nc)
				defer test.ExpectApplied(t, e.kube, orig)
			}
			c := claim.DeepCopy()
			c.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: v1alpha1.Group, Kind: "TofuNodeClass", Name: "sim"}
			if tc.claim != nil {
				tc.claim(c)
			}
			got, err := e.provider.IsDrifted(e.ctx, c)
			if err != nil || got != tc.want {
				t.Errorf("IsDrifted = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// A local module's content digest is in the drift hash; a remote module's nodes drift with its
// source (its ref), not with what a moved tag resolves to.
func TestNodeHashModule(t *testing.T) {
	hash := func(source, digest string) string {
		nc := test.NodeClass("sim", func(nc *v1alpha1.TofuNodeClass) { nc.Spec.Module.Source = source })
		if digest != "" {
			nc.Status.Modules = []v1alpha1.ModuleStatus{{Source: source, Digest: digest}}
		}
		return nodeHash(nc, &nc.Spec.NodeTypes[0])
	}
	const local, remote = "/modules/sim", "git::https://git.example.com/m.git?ref=v1"
	if hash(local, "sha256:a") == hash(local, "sha256:b") {
		t.Error("editing a local module does not drift its nodes")
	}
	if hash(remote, "sha256:a") != hash(remote, "sha256:b") {
		t.Error("a moved tag drifts a remote module's nodes")
	}
	if hash(remote, "sha256:a") == hash("git::https://git.example.com/m.git?ref=v2", "sha256:a") {
		t.Error("changing the ref does not drift the nodes")
	}
}

// A node type's own module is what its claims record and what its drift hash covers; the
// class's module no longer counts for it, and the other types keep theirs.
func TestNodeTypeModule(t *testing.T) {
	nc := test.TwoTypeClass()
	nc.Spec.NodeTypes[1].Module = &v1alpha1.ModuleSource{Source: "/modules/large", Version: "1"}
	small, large := &nc.Spec.NodeTypes[0], &nc.Spec.NodeTypes[1]
	if src, _, _, err := moduleFor(nc, large); err != nil || src != "/modules/large" {
		t.Errorf("the large type's module is %q (%v), want its own", src, err)
	}
	if src, _, _, _ := moduleFor(nc, small); src != nc.Spec.Module.Source {
		t.Errorf("the small type's module is %q, want the class's", src)
	}
	before := [2]string{nodeHash(nc, small), nodeHash(nc, large)}
	nc.Spec.Module.Version = "2"
	if nodeHash(nc, small) == before[0] || nodeHash(nc, large) != before[1] {
		t.Error("a new class module version must drift the small type only")
	}
	large.Module.Version = "2"
	if nodeHash(nc, large) == before[1] {
		t.Error("a new version of the type's own module does not drift it")
	}
}

// A claim of a registry module records the address and the exact version the class's
// constraint resolved to; a resolution of another constraint is not taken for it. A newer
// release does not drift the nodes, a new constraint does.
func TestRegistryModuleRecorded(t *testing.T) {
	nc := test.TwoTypeClass()
	nc.Spec.Module = v1alpha1.ModuleSource{Source: "registry.example.com/org/node/sim", Version: "~> 1.2"}
	nt := &nc.Spec.NodeTypes[0]
	nc.Status.Modules = []v1alpha1.ModuleStatus{{Source: nc.Spec.Module.Source, Constraint: ">= 2", Pinned: nc.Spec.Module.Source, Version: "2.0.0", Digest: "sha256:b"}}
	if _, _, _, err := moduleFor(nc, nt); err == nil || !strings.Contains(err.Error(), "not been resolved yet with version ~> 1.2") {
		t.Errorf("with only another constraint resolved moduleFor gave %v, want not resolved", err)
	}
	nc.Status.Modules = append(nc.Status.Modules, v1alpha1.ModuleStatus{Source: nc.Spec.Module.Source, Constraint: "~> 1.2", Pinned: nc.Spec.Module.Source, Version: "1.2.3", Digest: "sha256:a"})
	src, version, digest, err := moduleFor(nc, nt)
	if err != nil || src != nc.Spec.Module.Source || version != "1.2.3" || digest != "sha256:a" {
		t.Errorf("moduleFor = %q %q %q (%v), want the address at 1.2.3 with digest sha256:a", src, version, digest, err)
	}
	before := nodeHash(nc, nt)
	nc.Status.Modules[1].Version, nc.Status.Modules[1].Digest = "1.2.4", "sha256:c"
	if nodeHash(nc, nt) != before {
		t.Error("a newer release drifts the nodes")
	}
	nc.Spec.Module.Version = "~> 1.3"
	if nodeHash(nc, nt) == before {
		t.Error("a new constraint does not drift the nodes")
	}
}
