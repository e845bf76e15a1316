// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"
	"github.com/fulfiller-sh/fulfiller/internal/claims/nodeclass"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
)

type discardEvents struct{}

func (discardEvents) Publish(...events.Event) {}

// TestCatalogueClass: a class of the real API server selecting "shared CPU, at least 4 GiB"
// from the stand-in's catalogue resolves, through the NodeClass controller and this family,
// to the stand-in's types and location prices; the CloudProvider offers them to Karpenter
// with the cheapest launchable offering the stand-in's cheapest; after the stand-in raises
// that type's price above another's, the next refresh makes the other the cheapest; a
// refresh that fails keeps the last list with CatalogReady False and a reason.
func TestCatalogueClass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := standin.StartT(t, standin.Options{})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	kube, err := client.New(controlPlane.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "catalog-test"
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hcloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}},
		StringData: map[string]string{EnvToken: s.Token(), EnvEndpoint: s.Endpoint()}}); err != nil {
		t.Fatal(err)
	}
	gib4 := resource.MustParse("4Gi")
	nc := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "catalog-selecting"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family:      v1alpha1.FamilyHcloud,
			Module:      v1alpha1.ModuleSource{Source: moduleDir(t), Version: "test"},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: "hcloud"}},
			Bootstrap:   v1alpha1.BootstrapSpec{APIServerEndpoint: strings.TrimPrefix(controlPlane.Server, "https://")},
			Variables:   map[string]string{"cluster": "prod-eu"},
			Catalog: &v1alpha1.Catalog{
				Select:          []v1alpha1.TypeSelector{{CPU: v1alpha1.CPUShared, MinMemory: &gib4}},
				RefreshInterval: &metav1.Duration{Duration: 2 * time.Minute},
			},
		},
	}
	if err := kube.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	families, err := family.NewRegistry(NewFamily())
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	controller := nodeclass.NewController(nodeclass.Options{Kube: kube, APIReader: kube, Clock: clk, Recorder: discardEvents{}, SecretNamespace: ns, Families: families, Cluster: "prod-eu"})
	reconcileClass := func() *v1alpha1.TofuNodeClass {
		t.Helper()
		got := &v1alpha1.TofuNodeClass{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), got); err != nil {
			t.Fatal(err)
		}
		if _, err := controller.Reconcile(ctx, got); err != nil {
			t.Fatal(err)
		}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	cp := cloudprovider.New(cloudprovider.Options{Kube: kube, Clock: clk, Unavailable: cloudprovider.NewUnavailableOfferings(clk, 3*time.Minute)})
	pool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	pool.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Name: nc.Name}
	// cheapest is the cheapest launchable offering Karpenter is offered.
	cheapest := func() (string, string, float64) {
		t.Helper()
		its, err := cp.GetInstanceTypes(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		name, zone, price := "", "", math.Inf(1)
		for _, it := range its {
			for _, o := range it.Offerings {
				if o.Available && o.Price < price {
					name, zone, price = it.Name, o.Zone(), o.Price
				}
			}
		}
		return name, zone, price
	}

	got := reconcileClass()
	if c := got.StatusConditions().Get(v1alpha1.ConditionCatalogReady); c == nil || !c.IsTrue() {
		t.Fatalf("CatalogReady = %+v", c)
	}
	var names []string
	for _, nt := range got.Status.Catalog.NodeTypes {
		names = append(names, nt.Name)
	}
	// The stand-in's shared-CPU types of at least 4 GiB (DefaultCatalog).
	if strings.Join(names, ",") != "cax11,cpx22,cpx32,cx23,cx33,cx43" || got.Status.NodeTypeCount != 6 {
		t.Fatalf("resolved %v (count %d)", names, got.Status.NodeTypeCount)
	}
	if nt, _ := got.NodeType("cpx22"); len(nt.Offerings) != 6 || nt.Offerings[3].Zone != "ash" || nt.Offerings[3].Price != "0.01248" {
		t.Errorf("cpx22 offerings %+v, want six locations, ash at 1.2 × 0.0104", nt.Offerings)
	}
	if name, zone, price := cheapest(); name != "cx23" || price != 0.0056 {
		t.Fatalf("cheapest offering %s in %s at %v, want cx23 at 0.0056", name, zone, price)
	}

	// The stand-in raises cx23 above cax11 everywhere; the next refresh makes cax11 cheapest.
	for _, l := range []string{"fsn1", "nbg1", "hel1"} {
		s.SetPrice("cx23", l, 0.0099)
	}
	clk.Step(time.Minute)
	reconcileClass()
	if name, _, _ := cheapest(); name != "cx23" {
		t.Errorf("the price changed within the refresh interval: cheapest %s", name)
	}
	clk.Step(time.Minute)
	reconcileClass()
	if name, _, price := cheapest(); name != "cax11" || price != 0.0064 {
		t.Errorf("cheapest after cx23's price rose: %s at %v, want cax11 at 0.0064", name, price)
	}

	// A refresh that fails keeps the list.
	s.Fail(standin.Failure{Times: 100, PathPrefix: "/server_types", Code: "service_error"})
	clk.Step(2 * time.Minute)
	got = reconcileClass()
	c := got.StatusConditions().Get(v1alpha1.ConditionCatalogReady)
	if c.IsTrue() || c.Reason != v1alpha1.ReasonCatalogRefreshFailed || !strings.Contains(c.Message, "service_error") ||
		!strings.Contains(c.Message, "keeping the last good list of 6 node types") {
		t.Errorf("CatalogReady after a failed refresh = %s %s %q", c.Status, c.Reason, c.Message)
	}
	if got.Status.NodeTypeCount != 6 {
		t.Errorf("%d node types after a failed refresh", got.Status.NodeTypeCount)
	}
	if name, _, _ := cheapest(); name != "cax11" {
		t.Errorf("cheapest after a failed refresh: %s", name)
	}
}
