// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package garbagecollection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/message"
	"github.com/fulfiller-sh/fulfiller/internal/statelock"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner/executor"
)

// DefaultOrphanGrace is how old an orphaned machine or state must be before it is collected
// (FULFILLER_ORPHAN_GRACE): longer than any apply, so that a machine whose claim is being
// created right now is never taken for an orphan.
const DefaultOrphanGrace = 10 * time.Minute

// CollectInterval is how often the collector makes a pass by default, for orphans older than
// grace: a fifth of the grace, at least a minute, so that an orphan is deleted within 1.2
// graces, and each pass, which lists every account's machines (a request a page for a Hetzner
// Cloud project), is made 30 times an hour at the default grace of 10 minutes, not 60.
func CollectInterval(grace time.Duration) time.Duration {
	return max(grace/5, time.Minute)
}

// orphanNodeWatch is how long after deleting an orphaned machine the collector still deletes
// a Node with its provider ID: a machine that had joined may register its Node again while it
// stops.
const orphanNodeWatch = 10 * time.Minute

// Labels the OpenTofu kubernetes backend puts on every state Secret.
const (
	labelTFState       = "tfstate"
	labelTFStateSuffix = "tfstateSecretSuffix"
	labelTFWorkspace   = "tfstateWorkspace"
)

var orphansDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "fulfiller",
	Subsystem: "orphans",
	Name:      "deleted_total",
	Help:      "Orphaned machines, their Nodes and states the collector deleted, by kind (machine, node, state) and family.",
}, []string{"kind", "family"})

func init() { crmetrics.Registry.MustRegister(orphansDeleted) }

// MachineCollector deletes machines that outlived their claims, and states that outlived
// their Fulfillments and machines. It deletes a machine only when the machine's family lists
// it (family.Machines: it carries the labels the module sets), it carries this cluster's
// label, it names a claim that has no NodeClaim, no Fulfillment and no state, and it is older
// than the grace period. It deletes a kubernetes-backend state Secret only when it carries
// the claim UID label the fulfiller gives its states (another tool's are never touched), its
// Fulfillment is gone, it is older than the grace period, and every class that keeps states
// in its namespace has an inventory that was listed now and shows no machine of the claim.
// Without a cluster name it collects nothing: no machine can be proven this cluster's.
type MachineCollector struct {
	kube      client.Client
	apiReader client.Reader
	clock     clock.Clock
	recorder  events.Recorder
	families  family.Registry
	cluster   string
	// namespace holds the classes' credentials; stateNamespace the states of classes that
	// name no backend namespace.
	namespace, stateNamespace string
	grace, interval           time.Duration
	// spend takes the families' requests from the runs' API budgets (MachineOptions.Spend).
	spend func(executor.APIDemand)

	// deleted are the machines this collector deleted, by provider ID.
	mu      sync.Mutex
	deleted map[string]deletedMachine
}

// deletedMachine is when the collector deleted a machine, and its family.
type deletedMachine struct {
	at     time.Time
	family string
}

// MachineOptions are what the MachineCollector is built from.
type MachineOptions struct {
	Kube client.Client
	// APIReader reads uncached.
	APIReader client.Reader
	Clock     clock.Clock
	Recorder  events.Recorder
	Families  family.Registry
	// Cluster is this cluster's name; without it nothing is collected.
	Cluster string
	// Namespace holds the classes' credentials; StateNamespace the states of classes that
	// name no backend namespace.
	Namespace, StateNamespace string
	// Grace is how old an orphan must be (default DefaultOrphanGrace); Interval how often a
	// pass is made (default CollectInterval(Grace)).
	Grace    time.Duration
	Interval time.Duration
	// Spend, when set, takes the requests the families' calls make from the API budgets
	// the runs are admitted by (executor.APIBudgets.Take; family.Scope.Spend).
	Spend func(executor.APIDemand)
}

// NewMachineCollector returns a collector that runs every interval.
func NewMachineCollector(o MachineOptions) *MachineCollector {
	if o.Grace <= 0 {
		o.Grace = DefaultOrphanGrace
	}
	if o.Interval <= 0 {
		o.Interval = CollectInterval(o.Grace)
	}
	return &MachineCollector{kube: o.Kube, apiReader: o.APIReader, clock: o.Clock, recorder: o.Recorder, families: o.Families, cluster: o.Cluster,
		namespace: o.Namespace, stateNamespace: o.StateNamespace, grace: o.Grace, interval: o.Interval, spend: o.Spend, deleted: map[string]deletedMachine{}}
}

// Register runs the collector on the leader, every interval.
func (o *MachineCollector) Register(_ context.Context, m manager.Manager) error {
	return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if o.cluster == "" {
			log.FromContext(ctx).Info("no cluster name (FULFILLER_CLUSTER_NAME): orphaned machines and states are not collected")
			return nil
		}
		for {
			if err := o.Collect(ctx); err != nil {
				log.FromContext(ctx).Error(err, "collecting orphaned machines and states")
			}
			select {
			case <-ctx.Done():
				return nil
			case <-o.clock.After(o.interval):
			}
		}
	}))
}

// inventoried is what one class's inventory listed.
type inventoried struct {
	class    *v1alpha1.TofuNodeClass
	family   family.Family
	inv      family.Machines
	scope    family.Scope
	machines []family.Machine
}

// Collect makes one pass: machines first, then states. A class whose inventory cannot be
// listed is skipped (and keeps every state of its namespace).
func (o *MachineCollector) Collect(ctx context.Context) error {
	if o.cluster == "" {
		return nil
	}
	classes := &v1alpha1.TofuNodeClassList{}
	if err := o.apiReader.List(ctx, classes); err != nil {
		return fmt.Errorf("listing nodeclasses: %w", err)
	}
	var errs []error
	var listed []inventoried
	// unproven are the state namespaces some class keeps states in without an inventory
	// that was listed now: their states are kept.
	unproven := map[string]bool{}
	names := map[string]bool{}
	for i := range classes.Items {
		names[classes.Items[i].Name] = true
	}
	// Classes that reach the same account (family.MachinesAccount) share its one listing.
	accounts, accountErrs, accountListed := map[string][]family.Machine{}, map[string]error{}, map[string]bool{}
	for i := range classes.Items {
		nc := &classes.Items[i]
		ns := o.classStateNamespace(nc)
		f, ok := classconfig.Family(o.families, nc)
		inv, hasInventory := f.(family.Machines)
		if !ok || !hasInventory {
			unproven[ns] = true
			continue
		}
		env, err := classconfig.ReadCredentials(ctx, o.apiReader, o.namespace, nc.Spec.Credentials)
		if err != nil {
			unproven[ns] = true
			errs = append(errs, fmt.Errorf("credentials of nodeclass %s: %w", nc.Name, err))
			continue
		}
		scope := family.Scope{Class: nc, Env: env, Cluster: o.cluster, Spend: o.spend}
		var account string
		if a, ok := f.(family.MachinesAccount); ok {
			account = f.Name() + "/" + a.MachinesAccount(scope)
		}
		machines, err, done := accounts[account], accountErrs[account], account != "" && accountListed[account]
		if !done {
			machines, err = inv.List(ctx, scope)
			if account != "" {
				accounts[account], accountErrs[account], accountListed[account] = machines, err, true
			}
		}
		if err != nil {
			unproven[ns] = true
			errs = append(errs, fmt.Errorf("listing the machines of nodeclass %s: %w", nc.Name, err))
			continue
		}
		listed = append(listed, inventoried{class: nc, family: f, inv: inv, scope: scope, machines: machines})
	}
	live := map[string]bool{} // claims with a machine
	for _, l := range listed {
		for _, m := range l.machines {
			live[m.Claim] = true
		}
	}
	// Classes may share a project, so a machine may be listed more than once: the class its
	// label names collects it, or, when that class is gone, the first class that lists it.
	seen := map[string]bool{}
	for _, l := range listed {
		for _, m := range l.machines {
			key := l.family.Name() + "/" + m.ID
			if (names[m.Class] && m.Class != l.class.Name) || seen[key] {
				continue
			}
			seen[key] = true
			if err := o.collectMachine(ctx, l, m); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := o.collectStates(ctx, classes.Items, unproven, live); err != nil {
		errs = append(errs, err)
	}
	if err := o.collectNodes(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// collectMachine deletes one listed machine if it is an orphan of this cluster.
func (o *MachineCollector) collectMachine(ctx context.Context, l inventoried, m family.Machine) error {
	if m.Cluster != o.cluster || m.Claim == "" || m.Created.IsZero() || o.clock.Since(m.Created) < o.grace {
		return nil
	}
	if l.class.Spec.Backend.TypeOrDefault() != v1alpha1.BackendKubernetes {
		return nil // its state is in a database this collector does not read: it may exist
	}
	if gone, err := o.claimGone(ctx, m.Claim, o.classStateNamespace(l.class)); err != nil || !gone {
		return err
	}
	if err := l.inv.Delete(ctx, l.scope, m); err != nil {
		return fmt.Errorf("deleting orphaned machine %s (%s) of nodeclass %s: %w", m.Name, m.ID, l.class.Name, err)
	}
	orphansDeleted.WithLabelValues("machine", l.family.Name()).Inc()
	if m.ProviderID != "" {
		o.mu.Lock()
		o.deleted[m.ProviderID] = deletedMachine{at: o.clock.Now(), family: l.family.Name()}
		o.mu.Unlock()
	}
	message := fmt.Sprintf("deleted machine %s (%s %s) of claim %s: it has no NodeClaim, Fulfillment or state and is %s old",
		m.Name, l.family.Name(), m.ID, m.Claim, message.Duration(o.clock.Since(m.Created).Truncate(time.Second)))
	log.FromContext(ctx).Info(message, "nodeclass", l.class.Name)
	o.recorder.Publish(events.Event{InvolvedObject: l.class, Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonOrphanMachineDeleted,
		Message: message, DedupeValues: []string{m.ID}})
	return nil
}

// collectNodes deletes the Nodes of the machines this collector deleted: a machine that had
// joined before its claim went leaves its Node behind, which, with no cloud-controller-manager,
// nothing else removes. A Node is deleted when its provider ID is one of theirs, deleted within
// orphanNodeWatch, and no NodeClaim has that provider ID.
func (o *MachineCollector) collectNodes(ctx context.Context) error {
	o.mu.Lock()
	watched := map[string]string{} // provider ID → family
	for id, d := range o.deleted {
		if o.clock.Since(d.at) > orphanNodeWatch {
			delete(o.deleted, id)
			continue
		}
		watched[id] = d.family
	}
	o.mu.Unlock()
	if len(watched) == 0 {
		return nil
	}
	nodes := &corev1.NodeList{}
	if err := o.kube.List(ctx, nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	claims := &karpv1.NodeClaimList{}
	if err := o.apiReader.List(ctx, claims); err != nil {
		return fmt.Errorf("listing nodeclaims: %w", err)
	}
	for _, c := range claims.Items {
		delete(watched, c.Status.ProviderID)
	}
	var errs []error
	for i := range nodes.Items {
		n := &nodes.Items[i]
		fam, ok := watched[n.Spec.ProviderID]
		if !ok {
			continue
		}
		err := o.kube.Delete(ctx, n, client.Preconditions{UID: &n.UID})
		if client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting node %s of an orphaned machine: %w", n.Name, err))
			continue
		}
		orphansDeleted.WithLabelValues("node", fam).Inc()
		log.FromContext(ctx).Info("deleted the node of an orphaned machine", "node", n.Name, "providerID", n.Spec.ProviderID)
	}
	return errors.Join(errs...)
}

// claimGone reports whether a claim has no NodeClaim, no Fulfillment and no state (in the
// kubernetes backend of its class's namespace).
func (o *MachineCollector) claimGone(ctx context.Context, claim, stateNamespace string) (bool, error) {
	for _, obj := range []client.Object{&karpv1.NodeClaim{}, &v1alpha1.Fulfillment{}} {
		err := o.apiReader.Get(ctx, client.ObjectKey{Name: claim}, obj)
		if err == nil {
			return false, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading %T %s: %w", obj, claim, err)
		}
	}
	key, err := statelock.KeyFor(claim)
	if err != nil {
		return false, nil // no state can be named so: not a claim of ours
	}
	exists, err := statelock.Exists(ctx, o.apiReader, stateNamespace, key)
	if err != nil {
		return false, fmt.Errorf("reading the state of %s: %w", claim, err)
	}
	return !exists, nil
}

// collectStates deletes the fulfiller's kubernetes-backend state Secrets (and lock Leases):
// those labelled with a claim's UID whose Fulfillment is gone, that are older than the grace period, in namespaces where every
// class's inventory was listed and shows no machine of the claim.
func (o *MachineCollector) collectStates(ctx context.Context, classes []v1alpha1.TofuNodeClass, unproven map[string]bool, live map[string]bool) error {
	namespaces := map[string]bool{o.stateNamespace: true}
	for i := range classes {
		if classes[i].Spec.Backend.TypeOrDefault() == v1alpha1.BackendKubernetes {
			namespaces[o.classStateNamespace(&classes[i])] = true
		}
	}
	var errs []error
	for ns := range namespaces {
		if unproven[ns] {
			continue
		}
		list := &corev1.SecretList{}
		// Only the fulfiller's states: the backend's labels alone are on any OpenTofu state in
		// the namespace; the claim's UID is what the fulfiller adds (the backend's labels).
		if err := o.apiReader.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{labelTFState: "true", labelTFWorkspace: statelock.Workspace},
			client.HasLabels{keys.LabelNodeClaimUID}); err != nil {
			errs = append(errs, fmt.Errorf("listing states in %s: %w", ns, err))
			continue
		}
		for i := range list.Items {
			secret := &list.Items[i]
			claim := secret.Labels[labelTFStateSuffix]
			key, err := statelock.KeyFor(claim)
			if err != nil || key.SecretName() != secret.Name || live[claim] || o.clock.Since(secret.CreationTimestamp.Time) < o.grace {
				continue
			}
			if gone, err := fulfillmentGone(ctx, o.kube, o.apiReader, claim); err != nil || !gone {
				if err != nil {
					errs = append(errs, err)
				}
				continue
			}
			if err := statelock.Remove(ctx, o.kube, ns, key); err != nil {
				errs = append(errs, fmt.Errorf("removing orphaned state %s/%s: %w", ns, secret.Name, err))
				continue
			}
			orphansDeleted.WithLabelValues("state", "").Inc()
			log.FromContext(ctx).Info("removed the state of a claim that has no Fulfillment and no machine", "secret", client.ObjectKeyFromObject(secret), "nodeclaim", claim)
		}
	}
	return errors.Join(errs...)
}

// classStateNamespace is where a class's states live.
func (o *MachineCollector) classStateNamespace(nc *v1alpha1.TofuNodeClass) string {
	return classconfig.StateNamespace(nc.Spec.Backend, o.stateNamespace)
}
