// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package robot

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcloudprovider "sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// createFixture is a pool of one standby server of each type (101 ax41, 201 ax101), a Ready
// class and a CloudProvider over it whose first failCreates Fulfillment writes fail; claim may launch as
// either type. firstCreate runs that failing Create and returns the server it leased.
type createFixture struct {
	*fixture
	kube     client.WithWatch
	provider *cloudprovider.CloudProvider
	claim    *karpv1.NodeClaim
}

func newCreateFixture(t *testing.T, failCreates int) *createFixture {
	m := newFakeMachines(101, 201)
	fx := newFixture(t, v1alpha1.RobotPool{Servers: append(servers("ax41", 101), servers("ax101", 201)...), Warm: int32p(0)}, m)
	fx.keep(noClaims)
	fx.standby(101, 201)

	kube := fx.s.Writer.(client.WithWatch)
	test.Ready(fx.nc)
	test.ExpectApplied(t, kube, fx.nc)
	failCreate := failCreates
	writer := interceptor.NewClient(kube, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*v1alpha1.Fulfillment); ok && failCreate > 0 {
				failCreate--
				return errors.New("etcdserver: request timed out")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	families, err := family.NewRegistry(fx.fam)
	if err != nil {
		t.Fatal(err)
	}
	provider := cloudprovider.New(cloudprovider.Options{Kube: writer, Clock: clock.RealClock{}, StateNamespace: stateNS, Families: families,
		Unavailable: cloudprovider.NewUnavailableOfferings(clock.RealClock{}, cloudprovider.UnavailableOfferingsTTL)})
	claim := test.NodeClaim("robot-aaaaa", "robot", fx.now, func(c *karpv1.NodeClaim) {
		c.Spec.Requirements[0] = karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable,
			Operator: corev1.NodeSelectorOpIn, Values: []string{"ax41", "ax101"}}
	})
	test.ExpectApplied(t, kube, claim)
	return &createFixture{fixture: fx, kube: kube, provider: provider, claim: claim}
}

func (cf *createFixture) firstCreate() string {
	cf.t.Helper()
	if _, err := cf.provider.Create(cf.ctx, cf.claim); err == nil {
		cf.t.Fatal("create succeeded while the Fulfillment could not be written")
	}
	for _, id := range []string{"101", "201"} {
		if cf.item(id).Holder == statelock.LeaseHolder(cf.claim.Name, string(cf.claim.UID)) {
			return id
		}
	}
	cf.t.Fatal("the first create leased no server")
	return ""
}

// Defect 11 of issue 25: Create leases a server, writing the Fulfillment fails, and the retry
// finds the leased server's type exhausted (the claim holds its only server), chooses another
// type and gets the same server again. The record must name the server's type, never the
// type the retry chose.
func TestCreateRetryRecordsTheHeldServersType(t *testing.T) {
	cf := newCreateFixture(t, 1)
	held := cf.firstCreate()
	heldType := map[string]string{"101": "ax41", "201": "ax101"}[held]

	got, err := cf.provider.Create(cf.ctx, cf.claim)
	if err != nil {
		t.Fatalf("create again: %v", err)
	}
	f := test.ExpectExists(t, cf.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: cf.claim.Name}})
	if f.Spec.Parameters["server_number"] != held || f.Spec.NodeType != heldType || got.Labels[corev1.LabelInstanceTypeStable] != heldType {
		t.Errorf("recorded node type %s (claim labelled %s) on server %s, want the held server %s of type %s",
			f.Spec.NodeType, got.Labels[corev1.LabelInstanceTypeStable], f.Spec.Parameters["server_number"], held, heldType)
	}
	for _, id := range []string{"101", "201"} {
		if it := cf.item(id); id != held && it.Leased() {
			t.Errorf("server %s leased to %s as well", id, it.Holder)
		}
	}
}

// The same retry after the class changed so that the held server's type no longer fits the
// claim: a CreateError that says so, no record, and no second server leased.
func TestCreateRetryRefusesAHeldServerThatNoLongerFits(t *testing.T) {
	cf := newCreateFixture(t, 1)
	held := cf.firstCreate()
	for i := range cf.nc.Spec.NodeTypes {
		if nt := &cf.nc.Spec.NodeTypes[i]; nt.Name == map[string]string{"101": "ax41", "201": "ax101"}[held] {
			nt.Capacity[corev1.ResourceCPU] = resource.MustParse("500m") // the claim asks for 1
		}
	}
	cf.nc.Generation++
	test.Ready(cf.nc)
	test.ExpectApplied(t, cf.kube, cf.nc)

	_, err := cf.provider.Create(cf.ctx, cf.claim)
	var createErr *karpcloudprovider.CreateError
	if !errors.As(err, &createErr) || createErr.ConditionReason != v1alpha1.ReasonLeasedMachineUnfit ||
		!strings.Contains(err.Error(), "holds machine hrobot://"+held) {
		t.Fatalf("create again: %v, want a CreateError (%s) naming the held server", err, v1alpha1.ReasonLeasedMachineUnfit)
	}
	test.ExpectNotFound(t, cf.kube, &v1alpha1.Fulfillment{ObjectMeta: metav1.ObjectMeta{Name: cf.claim.Name}})
	for _, id := range []string{"101", "201"} {
		if it := cf.item(id); id != held && it.Leased() {
			t.Errorf("server %s leased to %s as well", id, it.Holder)
		}
	}
}

// A released server is back in standby seconds after its destroy, while Karpenter still
// terminates its previous claim and Node, both carrying hrobot://<server>. A claim given the
// server then would be matched to that Node by Karpenter, registered and initialized at
// once, and never see its own Node join. Create answers insufficient capacity until neither
// the Node nor the claim is left, and then leases the server.
func TestCreateWaitsForTheServersPreviousNodeAndClaim(t *testing.T) {
	cf := newCreateFixture(t, 0)
	cf.claim.Spec.Requirements[0].Values = []string{"ax41"}
	test.ExpectApplied(t, cf.kube, cf.claim)

	// Claim and Node of server 101's previous lease, terminating: Karpenter's finalizer holds them.
	oldClaim := test.NodeClaim("robot-old", "robot", cf.now, func(c *karpv1.NodeClaim) {
		c.Finalizers = []string{karpv1.TerminationFinalizer}
		c.Status.ProviderID = "hrobot://101"
	})
	oldNode := test.Node("robot-old", "hrobot://101", cf.now, func(n *corev1.Node) { n.Finalizers = []string{karpv1.TerminationFinalizer} })
	for _, obj := range []client.Object{oldClaim, oldNode} {
		test.ExpectApplied(t, cf.kube, obj)
		if err := cf.kube.Delete(cf.ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := cf.kube.Get(cf.ctx, client.ObjectKeyFromObject(oldClaim), oldClaim); err != nil {
		t.Fatal(err)
	}
	if oldClaim.Status.ProviderID != "hrobot://101" {
		oldClaim.Status.ProviderID = "hrobot://101"
		if err := cf.kube.Status().Update(cf.ctx, oldClaim); err != nil {
			t.Fatal(err)
		}
	}

	holder := statelock.LeaseHolder(cf.claim.Name, string(cf.claim.UID))
	refused := func(when string) {
		t.Helper()
		_, err := cf.provider.Create(cf.ctx, cf.claim)
		if !karpcloudprovider.IsInsufficientCapacityError(err) || !strings.Contains(err.Error(), v1alpha1.ReasonPoolExhausted) {
			t.Fatalf("%s: create = %v, want insufficient capacity, %s", when, err, v1alpha1.ReasonPoolExhausted)
		}
		if it := cf.item("101"); it.Leased() {
			t.Fatalf("%s: server 101 leased to %s", when, it.Holder)
		}
		if counts, err := cf.fam.Offer(cf.ctx, cf.withOccupied()); err != nil || counts["ax41"] != 0 {
			t.Fatalf("%s: offer %v, %v: want ax41 0", when, counts, err)
		}
	}
	refused("node and claim terminating")
	cf.gone(oldNode)
	refused("the claim terminating")
	cf.gone(oldClaim)

	got, err := cf.provider.Create(cf.ctx, cf.claim)
	if err != nil {
		t.Fatalf("create once both are gone: %v", err)
	}
	if got.Status.ProviderID != "hrobot://101" || cf.item("101").Holder != holder {
		t.Errorf("create: provider id %q, server 101 %+v; want hrobot://101 leased to the claim", got.Status.ProviderID, cf.item("101"))
	}
}

// withOccupied is the fixture's scope as the CloudProvider's pools make it, Occupied set.
func (cf *createFixture) withOccupied() family.Scope {
	families, err := family.NewRegistry(cf.fam)
	if err != nil {
		cf.t.Fatal(err)
	}
	pools := classconfig.Pools{Families: families, Reader: cf.kube, Writer: cf.kube, StateNamespace: stateNS, Cache: cf.kube}
	_, s, ok := pools.Of(cf.nc)
	if !ok || s.Occupied == nil {
		cf.t.Fatal("the robot class has no pool with Occupied")
	}
	return s
}

// gone removes the finalizers of a terminating object, as Karpenter does when it is done.
func (cf *createFixture) gone(obj client.Object) {
	cf.t.Helper()
	if err := cf.kube.Get(cf.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		cf.t.Fatal(err)
	}
	obj.SetFinalizers(nil)
	if err := cf.kube.Update(cf.ctx, obj); err != nil {
		cf.t.Fatal(err)
	}
	test.ExpectNotFound(cf.t, cf.kube, obj)
}
