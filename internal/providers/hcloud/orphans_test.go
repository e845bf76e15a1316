// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package hcloud

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/garbagecollection"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/providers/hcloud/standin"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/testenv"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

type keptEvents struct {
	mu     sync.Mutex
	events []events.Event
}

func (k *keptEvents) Publish(evts ...events.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.events = append(k.events, evts...)
}

// TestOrphanCollection runs the orphan collector with this family against a real API server
// and the stand-in. A server carrying the labels the module sets for a claim that has no
// NodeClaim, Fulfillment or state (its runner died after the create, before the state was
// written, and the claim was deleted) is deleted once it is older than the grace period, with
// an event naming it; a server of another cluster, one without labels, and one whose claim's
// state exists are kept; a state Secret without a Fulfillment or machine is removed, the one
// whose machine is listed is kept.
func TestOrphanCollection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := standin.StartT(t, standin.Options{})
	c := hcloudClient(s)
	kube, err := client.New(controlPlane.Config, client.Options{Scheme: clientscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns, states = "orphan-test", "orphan-states"
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: states}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hcloud", Labels: map[string]string{v1alpha1.LabelCredentials: "true"}}, StringData: map[string]string{EnvToken: s.Token(), EnvEndpoint: s.Endpoint()}},
	} {
		if err := kube.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	class := &v1alpha1.TofuNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "hcloud-orphans"},
		Spec: v1alpha1.TofuNodeClassSpec{
			Family: v1alpha1.FamilyHcloud, Module: v1alpha1.ModuleSource{Source: moduleDir(t)},
			Backend:     v1alpha1.Backend{Namespace: states},
			Credentials: []v1alpha1.CredentialsSource{{SecretName: "hcloud"}},
			Bootstrap:   v1alpha1.BootstrapSpec{APIServerEndpoint: "127.0.0.1:6443"},
			NodeTypes: []v1alpha1.NodeType{{Name: "cx23",
				Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("3800Mi")},
				Offerings: []v1alpha1.Offering{{Zone: "fsn1", Price: "0.0056"}}}},
		},
	}
	if err := kube.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	// What modules/hetzner-cloud labels a claim's server with (module_test checks it does).
	labels := func(cluster, claim string) map[string]string {
		return map[string]string{"fulfiller.sh/cluster": cluster, "fulfiller.sh/node": claim, "karpenter.sh/nodeclaim": claim,
			"fulfiller.sh/nodeclass": class.Name, "fulfiller.sh/node-type": "cx23"}
	}
	servers := map[string]int64{}
	for name, l := range map[string]map[string]string{
		"lost":    labels("prod-eu", "claim-lost"), // its runner died before the state was written
		"live":    labels("prod-eu", "claim-live"), // its state exists
		"foreign": labels("staging", "claim-foreign"),
		"bare":    nil,
	} {
		res, _, err := c.Server.Create(ctx, hcloud.ServerCreateOpts{Name: name, ServerType: &hcloud.ServerType{Name: "cx23"},
			Image: &hcloud.Image{Name: "ubuntu-24.04"}, Location: &hcloud.Location{Name: "fsn1"}, Labels: l})
		if err != nil {
			t.Fatal(err)
		}
		// The server is locked until its create and the start that follows it are done.
		if err := c.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
			t.Fatal(err)
		}
		servers[name] = res.Server.ID
	}
	// States as the kubernetes backend writes them: one of the live server's claim, one of a
	// claim with neither Fulfillment nor machine.
	for _, claim := range []string{"claim-live", "claim-gone"} {
		key, err := statelock.KeyFor(claim)
		if err != nil {
			t.Fatal(err)
		}
		if err := kube.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: states, Name: key.SecretName(),
			Labels: map[string]string{"app.kubernetes.io/managed-by": "terraform", "tfstate": "true", "tfstateSecretSuffix": claim, "tfstateWorkspace": "default",
				keys.LabelNodeClaimUID: "uid-" + claim}},
			Data: map[string][]byte{"tfstate": []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
	}

	families, err := family.NewRegistry(NewFamily())
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	rec := &keptEvents{}
	// The runs' API budgets, on a clock of their own that stands still: nothing refills, so
	// what the collector takes shows whole (issue 25, defect 7).
	budgets := executor.NewAPIBudgets(clocktesting.NewFakeClock(time.Now()), families.APIDemands)
	collector := garbagecollection.NewMachineCollector(garbagecollection.MachineOptions{Kube: kube, APIReader: kube, Clock: clk, Recorder: rec, Families: families,
		Cluster: "prod-eu", Namespace: ns, StateNamespace: states, Grace: 10 * time.Minute, Interval: time.Minute, Spend: budgets.Take})
	project := executor.APIDemand{Budget: projectName(map[string]string{EnvToken: s.Token(), EnvEndpoint: s.Endpoint()}), Limit: ProjectRequestsPerHour, Per: time.Hour}
	before := len(s.Requests())
	exists := func(name string) bool {
		_, ok := s.Server(servers[name])
		return ok
	}
	stateExists := func(claim string) bool {
		key, _ := statelock.KeyFor(claim)
		err := kube.Get(ctx, client.ObjectKey{Namespace: states, Name: key.SecretName()}, &corev1.Secret{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Within the grace period nothing is touched.
	if err := collector.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists("lost") || !stateExists("claim-gone") || len(rec.events) != 0 {
		t.Fatalf("collected within the grace period: lost %v, state %v, events %d", exists("lost"), stateExists("claim-gone"), len(rec.events))
	}

	clk.Step(11 * time.Minute)
	if err := collector.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for exists("lost") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if exists("lost") {
		t.Error("the lost server was not deleted")
	}
	for _, name := range []string{"live", "foreign", "bare"} {
		if !exists(name) {
			t.Errorf("server %s was deleted", name)
		}
	}
	if len(rec.events) != 1 || rec.events[0].Reason != v1alpha1.ReasonOrphanMachineDeleted || !strings.Contains(rec.events[0].Message, "machine lost") ||
		!strings.Contains(rec.events[0].Message, "claim-lost") {
		t.Errorf("events %+v, want one naming the lost server", rec.events)
	}
	if stateExists("claim-gone") || !stateExists("claim-live") {
		t.Errorf("states after the collection: claim-gone %v (want removed), claim-live %v (want kept)", stateExists("claim-gone"), stateExists("claim-live"))
	}
	var deletes []string
	for _, r := range s.Requests() {
		if r.Method == "DELETE" {
			deletes = append(deletes, r.Path)
		}
	}
	if len(deletes) != 1 || !slices.ContainsFunc(deletes, func(p string) bool { return strings.HasSuffix(p, "/servers/"+strconv.FormatInt(servers["lost"], 10)) }) {
		t.Errorf("DELETE requests %v, want the lost server's only", deletes)
	}
	// Every request the collector made, its listings and the delete, came out of the
	// project's budget for runs.
	var made int
	var left float64
	testenv.Eventually(t, 10*time.Second, "the collector's requests to be taken from the project's budget", func() bool {
		made, left = len(s.Requests())-before, budgets.Left(project)
		return made > 0 && float64(ProjectRequestsPerHour-made) == left
	})
	t.Logf("the collector made %d requests; %v of %d are left for runs", made, left, ProjectRequestsPerHour)
}
