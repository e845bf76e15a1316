// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Leases on finite inventory: each item of a pool (a Robot server, by its number) is a
// coordination.k8s.io Lease in the state namespace. Its holderIdentity names the one claim
// that holds it; every change is a compare-and-swap on the Lease's resourceVersion, read from
// the API server (never a cache), so an item is never leased twice: not by two claims of a
// burst, not by two controllers, not across a restart. The Lease never expires (no
// leaseDurationSeconds): a lease is given up only by its holder, or after the holder is gone,
// by whoever proves it (the controller, knowing its claims).

// Annotations and labels of an inventory Lease.
const (
	// LabelInventoryPool names the pool an item Lease belongs to.
	LabelInventoryPool = "fulfiller.sh/inventory-pool"
	// LabelInventoryItem is the item's ID.
	LabelInventoryItem = "fulfiller.sh/inventory-item"
	// annotationQuarantined holds the reason an item is quarantined; annotationQuarantinedAt
	// when (RFC 3339).
	annotationQuarantined   = "inventory.fulfiller.sh/quarantined"
	annotationQuarantinedAt = "inventory.fulfiller.sh/quarantined-at"
	// attributePrefix starts the annotation of each attribute.
	attributePrefix = "inventory.fulfiller.sh/attr-"
)

// Errors of the inventory; test them with errors.Is.
var (
	ErrUnknownItem = errors.New("no such inventory item")
	ErrItemHeld    = errors.New("inventory item is leased to another claim")
	ErrQuarantined = errors.New("inventory item is quarantined")
	ErrNoFreeItem  = errors.New("no free inventory item")
	ErrNotHolder   = errors.New("inventory item is not leased to this claim")
	// ErrItemChanged: the item changed between reading and writing it more often than the
	// operation retries.
	ErrItemChanged = errors.New("inventory item changed concurrently")
)

// HeldError says who holds an item.
type HeldError struct {
	Item, Holder string
	Since        time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("inventory item %s is leased to %s since %s", e.Item, e.Holder, e.Since.UTC().Format(time.RFC3339))
}

func (e *HeldError) Unwrap() error { return ErrItemHeld }

// LeaseHolder is the identity of a claim holding an item: its name and UID, so that a new
// claim of the same name is not taken for the old one.
func LeaseHolder(claimName, claimUID string) string {
	return claimName + "/" + claimUID
}

// Item is one inventory item as its Lease records it.
type Item struct {
	ID string
	// Holder is the LeaseHolder identity of the claim holding it; empty when it is not leased.
	Holder string
	Since  time.Time
	// QuarantineReason is why the item is quarantined; empty when it is not.
	QuarantineReason string
	QuarantinedAt    time.Time
	// Attributes are what the family keeps about the item (a Robot server's recorded host
	// key, its install state).
	Attributes map[string]string
}

// Leased reports whether a claim holds the item.
func (i Item) Leased() bool { return i.Holder != "" }

// Quarantined reports whether the item is quarantined.
func (i Item) Quarantined() bool { return i.QuarantineReason != "" }

// Free reports whether the item may be leased: nobody holds it and it is not quarantined.
func (i Item) Free() bool { return !i.Leased() && !i.Quarantined() }

// LeasePool is one pool of items, each held through a Lease of its own. Reader must read
// from the API server (not a cache): the compare-and-swap needs the current resourceVersion.
type LeasePool struct {
	Reader    client.Reader
	Writer    client.Client
	Namespace string
	Pool      string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// casRetries bounds how often an operation re-reads an item that changed under it.
const casRetries = 8

func (inv LeasePool) now() time.Time {
	if inv.Now != nil {
		return inv.Now()
	}
	return time.Now()
}

// LeaseName is the name of an item's Lease.
func (inv LeasePool) LeaseName(id string) string {
	return "inventory-" + inv.Pool + "-" + strings.ToLower(id)
}

func (inv LeasePool) validate(id string) error {
	if errs := validation.IsDNS1123Subdomain(inv.LeaseName(id)); len(errs) > 0 {
		return fmt.Errorf("inventory item %q of pool %q cannot name a Lease: %s", id, inv.Pool, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(id); len(errs) > 0 {
		return fmt.Errorf("inventory item %q is not a label value: %s", id, strings.Join(errs, "; "))
	}
	return nil
}

// Ensure creates the Leases of items that have none (free, not quarantined). Existing ones
// are left as they are.
func (inv LeasePool) Ensure(ctx context.Context, ids ...string) error {
	for _, id := range ids {
		if err := inv.validate(id); err != nil {
			return err
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Namespace: inv.Namespace, Name: inv.LeaseName(id),
			Labels: map[string]string{LabelInventoryPool: inv.Pool, LabelInventoryItem: id},
		}}
		if err := inv.Writer.Create(ctx, lease); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the lease of inventory item %s: %w", id, err)
		}
	}
	return nil
}

// Get returns one item.
func (inv LeasePool) Get(ctx context.Context, id string) (Item, error) {
	lease, err := inv.get(ctx, id)
	if err != nil {
		return Item{}, err
	}
	return itemOf(id, lease), nil
}

// List returns the pool's items, sorted by ID.
func (inv LeasePool) List(ctx context.Context) ([]Item, error) {
	var leases coordinationv1.LeaseList
	if err := inv.Reader.List(ctx, &leases, client.InNamespace(inv.Namespace), client.MatchingLabels{LabelInventoryPool: inv.Pool}); err != nil {
		return nil, fmt.Errorf("listing inventory pool %s: %w", inv.Pool, err)
	}
	items := make([]Item, 0, len(leases.Items))
	for i := range leases.Items {
		items = append(items, itemOf(leases.Items[i].Labels[LabelInventoryItem], &leases.Items[i]))
	}
	sort.Slice(items, func(a, b int) bool { return items[a].ID < items[b].ID })
	return items, nil
}

// Acquire leases item id to holder. Leasing an item the holder holds already succeeds (a
// restarted controller repeating itself). A quarantined item is ErrQuarantined, one held by
// another claim a *HeldError (ErrItemHeld).
func (inv LeasePool) Acquire(ctx context.Context, id, holder string) error {
	if holder == "" {
		return errors.New("acquiring an inventory item: empty holder")
	}
	return inv.update(ctx, id, func(it Item, lease *coordinationv1.Lease) (bool, error) {
		switch {
		case it.Holder == holder:
			return false, nil
		case it.Leased():
			return false, &HeldError{Item: id, Holder: it.Holder, Since: it.Since}
		case it.Quarantined():
			return false, fmt.Errorf("%w: %s: %s", ErrQuarantined, id, it.QuarantineReason)
		}
		now := metav1.NewMicroTime(inv.now())
		lease.Spec.HolderIdentity = &holder
		lease.Spec.AcquireTime = &now
		lease.Spec.RenewTime = &now
		transitions := int32(0)
		if lease.Spec.LeaseTransitions != nil {
			transitions = *lease.Spec.LeaseTransitions
		}
		transitions++
		lease.Spec.LeaseTransitions = &transitions
		return true, nil
	})
}

// AcquireAny leases holder one free item of candidates, tried in order, and returns its ID.
// If holder already holds an item of the pool, that one is returned (whether or not it is a
// candidate): a claim holds at most one item. No free candidate is ErrNoFreeItem.
func (inv LeasePool) AcquireAny(ctx context.Context, holder string, candidates []string) (string, error) {
	items, err := inv.List(ctx)
	if err != nil {
		return "", err
	}
	for _, it := range items {
		if it.Holder == holder {
			return it.ID, nil
		}
	}
	for _, id := range candidates {
		err := inv.Acquire(ctx, id, holder)
		switch {
		case err == nil:
			return id, nil
		case errors.Is(err, ErrItemHeld), errors.Is(err, ErrQuarantined), errors.Is(err, ErrUnknownItem), errors.Is(err, ErrItemChanged):
			continue
		default:
			return "", err
		}
	}
	return "", fmt.Errorf("%w in pool %s (%d candidates)", ErrNoFreeItem, inv.Pool, len(candidates))
}

// Release gives up holder's lease on id, setting attrs (nil: none) in the same write. Only
// the holder releases: anyone else gets ErrNotHolder, and releasing a free item is
// ErrNotHolder too.
func (inv LeasePool) Release(ctx context.Context, id, holder string, attrs map[string]string) error {
	return inv.update(ctx, id, func(it Item, lease *coordinationv1.Lease) (bool, error) {
		if it.Holder != holder || holder == "" {
			return false, fmt.Errorf("%w: %s is held by %q, not %q", ErrNotHolder, id, it.Holder, holder)
		}
		lease.Spec.HolderIdentity = nil
		lease.Spec.AcquireTime = nil
		lease.Spec.RenewTime = nil
		setAttributes(lease, attrs)
		return true, nil
	})
}

// SetAttributes sets (or, with an empty value, removes) attributes of id, guarded by its
// holder: holder must hold the item, or, when holder is empty, the item must not be leased
// (the pool keeper's writes to a server in standby).
func (inv LeasePool) SetAttributes(ctx context.Context, id, holder string, attrs map[string]string) error {
	return inv.update(ctx, id, func(it Item, lease *coordinationv1.Lease) (bool, error) {
		if it.Holder != holder {
			return false, fmt.Errorf("%w: %s is held by %q, not %q", ErrNotHolder, id, it.Holder, holder)
		}
		setAttributes(lease, attrs)
		return true, nil
	})
}

// Quarantine marks id so that it is not leased again until Unquarantine; a claim holding it
// keeps it until it releases it. The first reason stays.
func (inv LeasePool) Quarantine(ctx context.Context, id, reason string) error {
	if reason == "" {
		return errors.New("quarantining an inventory item needs a reason")
	}
	return inv.update(ctx, id, func(it Item, lease *coordinationv1.Lease) (bool, error) {
		if it.Quarantined() {
			return false, nil
		}
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[annotationQuarantined] = reason
		lease.Annotations[annotationQuarantinedAt] = inv.now().UTC().Format(time.RFC3339)
		return true, nil
	})
}

// Unquarantine clears the quarantine of id (someone looked at the server).
func (inv LeasePool) Unquarantine(ctx context.Context, id string) error {
	return inv.update(ctx, id, func(it Item, lease *coordinationv1.Lease) (bool, error) {
		if !it.Quarantined() {
			return false, nil
		}
		delete(lease.Annotations, annotationQuarantined)
		delete(lease.Annotations, annotationQuarantinedAt)
		return true, nil
	})
}

// update reads id's Lease, lets change decide (and edit it), and writes it with the
// resourceVersion it read; on a conflict it starts over, up to casRetries times.
func (inv LeasePool) update(ctx context.Context, id string, change func(Item, *coordinationv1.Lease) (bool, error)) error {
	for range casRetries {
		lease, err := inv.get(ctx, id)
		if err != nil {
			return err
		}
		write, err := change(itemOf(id, lease), lease)
		if err != nil || !write {
			return err
		}
		err = inv.Writer.Update(ctx, lease)
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			continue
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: %s in pool %s", ErrUnknownItem, id, inv.Pool)
		default:
			return fmt.Errorf("writing the lease of inventory item %s: %w", id, err)
		}
	}
	return fmt.Errorf("%w: %s in pool %s", ErrItemChanged, id, inv.Pool)
}

func (inv LeasePool) get(ctx context.Context, id string) (*coordinationv1.Lease, error) {
	if err := inv.validate(id); err != nil {
		return nil, err
	}
	lease := &coordinationv1.Lease{}
	if err := inv.Reader.Get(ctx, client.ObjectKey{Namespace: inv.Namespace, Name: inv.LeaseName(id)}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s in pool %s", ErrUnknownItem, id, inv.Pool)
		}
		return nil, fmt.Errorf("reading the lease of inventory item %s: %w", id, err)
	}
	if lease.Labels[LabelInventoryPool] != inv.Pool {
		return nil, fmt.Errorf("%w: lease %s is not an item of pool %s", ErrUnknownItem, lease.Name, inv.Pool)
	}
	return lease, nil
}

func itemOf(id string, lease *coordinationv1.Lease) Item {
	it := Item{ID: id, Attributes: map[string]string{}}
	if h := lease.Spec.HolderIdentity; h != nil {
		it.Holder = *h
	}
	if t := lease.Spec.AcquireTime; t != nil {
		it.Since = t.Time
	}
	for k, v := range lease.Annotations {
		switch {
		case k == annotationQuarantined:
			it.QuarantineReason = v
		case k == annotationQuarantinedAt:
			it.QuarantinedAt, _ = time.Parse(time.RFC3339, v)
		case strings.HasPrefix(k, attributePrefix):
			it.Attributes[strings.TrimPrefix(k, attributePrefix)] = v
		}
	}
	return it
}

func setAttributes(lease *coordinationv1.Lease, attrs map[string]string) {
	for k, v := range attrs {
		if v == "" {
			delete(lease.Annotations, attributePrefix+k)
			continue
		}
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[attributePrefix+k] = v
	}
}
