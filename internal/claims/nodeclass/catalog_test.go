// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fulfiller-sh/fulfiller/internal/claims/cloudprovider"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap/preflight"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/test"
)

// catalogType is a type of a test catalogue: cores, GiB, series, CPU kind, prices by zone.
func catalogType(name, series, cpu string, cores int, gib int64, arch string, prices map[string]string) family.CatalogType {
	nt := v1alpha1.NodeType{Name: name, Architecture: arch, Capacity: corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(cores), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(gib<<30*9/10, resource.BinarySI),
	}}
	for _, zone := range []string{"fsn1", "nbg1", "ash"} {
		if p, ok := prices[zone]; ok {
			nt.Offerings = append(nt.Offerings, v1alpha1.Offering{Zone: zone, Price: p})
		}
	}
	return family.CatalogType{NodeType: nt, Series: series, CPU: cpu, Cores: cores, Memory: *resource.NewQuantity(gib<<30, resource.BinarySI)}
}

func testCatalogue() []family.CatalogType {
	eu := func(p string) map[string]string { return map[string]string{"fsn1": p, "nbg1": p} }
	return []family.CatalogType{
		catalogType("cx23", "cx", v1alpha1.CPUShared, 2, 4, "", eu("0.0056")),
		catalogType("cx33", "cx", v1alpha1.CPUShared, 4, 8, "", eu("0.0088")),
		catalogType("cpx22", "cpx", v1alpha1.CPUShared, 2, 4, "", map[string]string{"fsn1": "0.0104", "ash": "0.0125"}),
		catalogType("ccx13", "ccx", v1alpha1.CPUDedicated, 2, 8, "", eu("0.0224")),
		catalogType("cax11", "cax", v1alpha1.CPUShared, 2, 4, "arm64", eu("0.0064")),
		catalogType("cx12", "cx", v1alpha1.CPUShared, 1, 2, "", eu("0.0040")),
	}
}

func names(types []v1alpha1.NodeType) string {
	var out []string
	for _, nt := range types {
		out = append(out, nt.Name)
	}
	return strings.Join(out, ",")
}

// TestSelectTypes: selectors match by name, series, CPU kind, architecture and nominal size
// (any selector; every field of one), zones keep their offerings, overrides change price,
// overhead, labels and variables; an override of an unknown type and a selection of nothing
// are precise errors.
func TestSelectTypes(t *testing.T) {
	gib4 := resource.MustParse("4Gi")
	for _, tc := range []struct {
		name    string
		catalog v1alpha1.Catalog
		want    string
		reason  string
	}{
		{name: "shared, at least 4 GiB", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{CPU: v1alpha1.CPUShared, MinMemory: &gib4}}},
			want: "cax11,cpx22,cx23,cx33"},
		{name: "shared amd64, 2 to 2 cores", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{CPU: v1alpha1.CPUShared, Architecture: "amd64", MinCPU: ptr.To[int32](2), MaxCPU: ptr.To[int32](2)}}},
			want: "cpx22,cx23"},
		{name: "series or names", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{Series: []string{"ccx"}}, {Names: []string{"cx12"}}}},
			want: "ccx13,cx12"},
		{name: "at most 4 GiB in ash", catalog: v1alpha1.Catalog{Zones: []string{"ash"}, Select: []v1alpha1.TypeSelector{{MaxMemory: &gib4}}},
			want: "cpx22"},
		{name: "nothing", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{Series: []string{"ccx"}, CPU: v1alpha1.CPUShared}}},
			reason: v1alpha1.ReasonNoTypesSelected},
		{name: "unknown override", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{}}, Overrides: []v1alpha1.TypeOverride{{Name: "cx99", Price: "1"}}},
			reason: v1alpha1.ReasonUnknownOverride},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectTypes(&tc.catalog, testCatalogue())
			if tc.reason != "" {
				if err == nil || err.Reason != tc.reason {
					t.Fatalf("selectTypes = %s, %v; want %s", names(got), err, tc.reason)
				}
				return
			}
			if err != nil || names(got) != tc.want {
				t.Fatalf("selectTypes = %s, %v; want %s", names(got), err, tc.want)
			}
		})
	}
	spec := &v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{Names: []string{"cx23"}}}, Overrides: []v1alpha1.TypeOverride{{Name: "cx23", Price: "0.5",
		Overhead: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}, Labels: map[string]string{"tier": "cheap"}, Variables: map[string]string{"image": "debian-13"}}}}
	all := testCatalogue()
	got, err := selectTypes(spec, all)
	if err != nil {
		t.Fatal(err)
	}
	nt := got[0]
	if nt.Offerings[0].Price != "0.5" || nt.Offerings[1].Price != "0.5" || nt.Overhead.Memory().String() != "300Mi" ||
		nt.Labels["tier"] != "cheap" || nt.Variables["image"] != "debian-13" {
		t.Errorf("overridden cx23 = %+v", nt)
	}
	if all[0].NodeType.Offerings[0].Price != "0.0056" || all[0].NodeType.Labels != nil {
		t.Error("an override changed the catalogue itself")
	}
}

// scriptedCatalogue is a family whose catalogue answers what the test says and counts reads.
type scriptedCatalogue struct {
	types []family.CatalogType
	err   error
	reads int
}

func (f *scriptedCatalogue) Name() string { return "scripted" }

func (f *scriptedCatalogue) Resolve(_ context.Context, s family.Scope) ([]family.CatalogType, error) {
	f.reads++
	if s.Env["TOKEN"] != "t0ken" || s.Cluster != "prod-eu" {
		return nil, errors.New("scope without the class's credentials or the cluster")
	}
	return f.types, f.err
}

// TestNodeClassCatalogue: a catalogue class resolves to its selection in status.catalog with
// CatalogReady True and Karpenter's instance types from it; the catalogue is read once per
// refresh interval; a changed price is a new version that the instance types follow at the
// next refresh; a failed refresh keeps the last good list (CatalogReady False with the reason
// and the list's age, Ready still True); before any list, GetInstanceTypes is an error, never
// an empty list; a family without a catalogue, a selection of nothing and an override of an
// unknown type are precise conditions.
func TestNodeClassCatalogue(t *testing.T) {
	module := writeModule(t, map[string]string{"main.tf": `
variable "node_name" { type = string }
output "provider_id" { value = "sim://${var.node_name}" }
`})
	gib4 := resource.MustParse("4Gi")
	newClass := func(familyName string, catalog v1alpha1.Catalog) *v1alpha1.TofuNodeClass {
		nc := test.TwoTypeClass()
		nc.Spec.Module.Source = module
		nc.Spec.Family = familyName
		nc.Spec.NodeTypes = nil
		nc.Spec.Catalog = &catalog
		nc.Spec.Credentials = []v1alpha1.CredentialsSource{{SecretName: "cloud"}}
		return nc
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fulfiller", Name: "cloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, Data: map[string][]byte{"TOKEN": []byte("t0ken")}}
	setup := func(t *testing.T, fam family.Family, nc *v1alpha1.TofuNodeClass) (func() *v1alpha1.TofuNodeClass, *clocktesting.FakeClock, *cloudprovider.CloudProvider) {
		registry, err := family.NewRegistry(fam)
		if err != nil {
			t.Fatal(err)
		}
		kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(nc, secret.DeepCopy()).WithStatusSubresource(nc).Build()
		clk := clocktesting.NewFakeClock(time.Now())
		c := NewController(Options{Kube: kube, APIReader: kube, Clock: clk, Recorder: &recordedEvents{}, SecretNamespace: "fulfiller", Families: registry, Cluster: "prod-eu"})
		c.preflight = func(context.Context) (*preflight.Failure, error) { return nil, nil }
		reconcileClass := func() *v1alpha1.TofuNodeClass {
			t.Helper()
			got := &v1alpha1.TofuNodeClass{}
			if err := kube.Get(context.Background(), client.ObjectKeyFromObject(nc), got); err != nil {
				t.Fatal(err)
			}
			res, err := c.Reconcile(context.Background(), got)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter <= 0 {
				t.Errorf("no requeue for a catalogue class")
			}
			if err := kube.Get(context.Background(), client.ObjectKeyFromObject(nc), got); err != nil {
				t.Fatal(err)
			}
			return got
		}
		return reconcileClass, clk, cloudprovider.New(cloudprovider.Options{Kube: kube, Clock: clk, Unavailable: cloudprovider.NewUnavailableOfferings(clk, 3*time.Minute)})
	}
	cond := func(nc *v1alpha1.TofuNodeClass, t string) *status.Condition { return nc.StatusConditions().Get(t) }
	pool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	pool.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Name: "c"}
	price := func(t *testing.T, cp *cloudprovider.CloudProvider, name, zone string) float64 {
		t.Helper()
		its, err := cp.GetInstanceTypes(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			for _, o := range it.Offerings {
				if it.Name == name && o.Zone() == zone {
					return o.Price
				}
			}
		}
		t.Fatalf("no instance type %s in %s", name, zone)
		return 0
	}

	t.Run("resolve, refresh, fail, keep", func(t *testing.T) {
		fam := &scriptedCatalogue{err: errors.New("connection refused")}
		nc := newClass("scripted", v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{CPU: v1alpha1.CPUShared, MinMemory: &gib4}},
			RefreshInterval: &metav1.Duration{Duration: 5 * time.Minute}})
		reconcileClass, clk, cp := setup(t, fam, nc)

		// The first read fails: no list, not Ready, and Karpenter is told so, not "no types".
		got := reconcileClass()
		if ready := cond(got, status.ConditionReady); ready.IsTrue() || ready.Reason != v1alpha1.ReasonCatalogRefreshFailed {
			t.Errorf("Ready = %s %s before any list", ready.Status, ready.Reason)
		}
		if its, err := cp.GetInstanceTypes(context.Background(), pool); err == nil {
			t.Errorf("GetInstanceTypes = %d types, nil error before the catalogue resolved", len(its))
		}

		fam.types, fam.err = testCatalogue(), nil
		clk.Step(failedCatalogRetry)
		got = reconcileClass()
		if ready := cond(got, status.ConditionReady); !ready.IsTrue() {
			t.Fatalf("Ready = %s %s %s", ready.Status, ready.Reason, ready.Message)
		}
		if c := cond(got, v1alpha1.ConditionCatalogReady); !c.IsTrue() || c.Reason != v1alpha1.ReasonCatalogResolved {
			t.Errorf("CatalogReady = %+v", c)
		}
		if names(got.Status.Catalog.NodeTypes) != "cax11,cpx22,cx23,cx33" || got.Status.NodeTypeCount != 4 || got.Status.Catalog.Version == "" {
			t.Errorf("status = %s, count %d, version %q", names(got.Status.Catalog.NodeTypes), got.Status.NodeTypeCount, got.Status.Catalog.Version)
		}
		if p := price(t, cp, "cx23", "fsn1"); p != 0.0056 {
			t.Errorf("cx23 fsn1 = %v", p)
		}
		version, reads := got.Status.Catalog.Version, fam.reads

		// Within the interval the catalogue is not read again.
		fam.types[0].NodeType.Offerings[0].Price = "0.02"
		clk.Step(time.Minute)
		reconcileClass()
		if fam.reads != reads {
			t.Errorf("catalogue read %d times within its refresh interval", fam.reads-reads)
		}
		// After it, the new price is a new version, and the instance types follow.
		clk.Step(5 * time.Minute)
		got = reconcileClass()
		if fam.reads != reads+1 || got.Status.Catalog.Version == version {
			t.Errorf("reads %d, version %s → %s after the refresh interval", fam.reads-reads, version, got.Status.Catalog.Version)
		}
		if p := price(t, cp, "cx23", "fsn1"); p != 0.02 {
			t.Errorf("cx23 fsn1 = %v after the price rose to 0.02", p)
		}

		// A failed refresh keeps the list, says why and how old it is, and Ready stays True.
		fam.err = family.Errorf(v1alpha1.ReasonInvalidCredentials, "the token may not read server types (forbidden)")
		clk.Step(7 * time.Minute)
		got = reconcileClass()
		c := cond(got, v1alpha1.ConditionCatalogReady)
		if c.IsTrue() || c.Reason != v1alpha1.ReasonInvalidCredentials || !strings.Contains(c.Message, "keeping the last good list of 4 node types, read 7m ago") {
			t.Errorf("CatalogReady after a failed refresh = %s %s %q", c.Status, c.Reason, c.Message)
		}
		if ready := cond(got, status.ConditionReady); !ready.IsTrue() {
			t.Errorf("Ready = %s %s: a stale list is still a list", ready.Status, ready.Reason)
		}
		if names(got.Status.Catalog.NodeTypes) != "cax11,cpx22,cx23,cx33" || price(t, cp, "cx23", "fsn1") != 0.02 {
			t.Errorf("the last good list was not kept: %s", names(got.Status.Catalog.NodeTypes))
		}
	})

	for _, tc := range []struct {
		name, family string
		catalog      v1alpha1.Catalog
		condition    string
		reason       string
	}{
		{name: "no catalogue", family: "", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{}}},
			condition: v1alpha1.ConditionCatalogReady, reason: v1alpha1.ReasonCatalogUnsupported},
		{name: "selects nothing", family: "scripted", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{Names: []string{"cx99"}}}},
			condition: v1alpha1.ConditionCatalogReady, reason: v1alpha1.ReasonNoTypesSelected},
		{name: "override of an unknown type", family: "scripted", catalog: v1alpha1.Catalog{Select: []v1alpha1.TypeSelector{{}},
			Overrides: []v1alpha1.TypeOverride{{Name: "cx99", Price: "0.001"}}},
			condition: v1alpha1.ConditionCatalogReady, reason: v1alpha1.ReasonUnknownOverride},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reconcileClass, _, cp := setup(t, &scriptedCatalogue{types: testCatalogue()}, newClass(tc.family, tc.catalog))
			got := reconcileClass()
			c := cond(got, tc.condition)
			ready := cond(got, status.ConditionReady)
			if c == nil || c.IsTrue() || c.Reason != tc.reason || ready.IsTrue() || ready.Reason != tc.reason {
				t.Errorf("%s = %+v, Ready = %s %s; want both False with %s", tc.condition, c, ready.Status, ready.Reason, tc.reason)
			}
			if _, err := cp.GetInstanceTypes(context.Background(), pool); err == nil {
				t.Error("GetInstanceTypes without an error for a class with no node types")
			}
		})
	}
}
