// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// failedCatalogRetry is how soon a catalogue that could not be read is read again: often
// enough to recover soon, rarely enough to stay within the cloud's request budget.
const failedCatalogRetry = time.Minute

// catalogReads remembers, per class, the catalogue last read from its family (every type,
// before selection) and when, so that the class is re-selected on every reconcile but its
// cloud is asked only once per refresh interval.
type catalogReads struct {
	mu    sync.Mutex
	items map[types.UID]catalogRead
}

type catalogRead struct {
	// input identifies what the read depended on: the family, the credentials, net or gross.
	input string
	types []family.CatalogType
	// read is when types were read; attempted when the last read was tried, failure what
	// it failed with (nil after a success).
	read, attempted time.Time
	failure         error
}

func newCatalogReads() *catalogReads { return &catalogReads{items: map[types.UID]catalogRead{}} }

func (r *catalogReads) get(uid types.UID) (catalogRead, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.items[uid]
	return v, ok
}

func (r *catalogReads) put(uid types.UID, v catalogRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items[uid] = v
}

// catalogCheck resolves a catalogue class's node types into nc.Status.Catalog and sets
// CatalogReady. The class's family reads its catalogue at most once per refresh interval
// (once a minute after a failure); every reconcile selects from what was read. A failed read
// keeps the last good list: CatalogReady is then False as a warning and Ready does not count
// it, so Karpenter keeps launching from the list. Only a class with no list at all, or whose
// selection is wrong, is not Ready for its catalogue.
func (c *Controller) catalogCheck(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
	f, ok := classconfig.Family(c.families, nc)
	cat, hasCatalogue := f.(family.Catalogue)
	if !ok || !hasCatalogue {
		name := nc.Spec.Family
		if name == "" {
			name = "generic"
		}
		return verdict{reason: v1alpha1.ReasonCatalogUnsupported,
			message: fmt.Sprintf("the %s family has no catalogue: list the node types in spec.nodeTypes", name)}, nil
	}
	env, err := classconfig.ReadCredentials(ctx, c.apiReader, c.secretNamespace, nc.Spec.Credentials)
	if ce, ok := classconfig.AsConfigError(err); ok {
		return c.staleOr(nc, verdict{unknown: true, reason: ce.Reason, message: "waiting for the credentials: " + ce.Message}), nil
	}
	if err != nil {
		return verdict{}, err
	}
	now := c.clock.Now()
	input := f.Name() + "/" + nc.Spec.Catalog.Prices + "/" + family.EnvDigest(env)
	read, known := c.catalogs.get(nc.UID)
	if !known || read.input != input {
		read = catalogRead{input: input}
	}
	if catalogDue(read, nc.Spec.Catalog.RefreshIntervalOrDefault(), now) {
		read.attempted = now
		all, err := cat.Resolve(ctx, family.Scope{Class: nc, Env: env, Cluster: c.cluster})
		if err == nil && len(all) == 0 {
			err = errors.New("the catalogue is empty")
		}
		catalogReadsTotal.WithLabelValues(nc.Name, nc.Spec.Family, catalogResult(err)).Inc()
		if err != nil {
			read.failure = err
		} else {
			read.types, read.read, read.failure = all, now, nil
		}
		c.catalogs.put(nc.UID, read)
	}
	if read.types == nil {
		// Nothing read in this process: the list in the status, if any, stands.
		return c.staleOr(nc, refreshFailure(f.Name(), read.failure)), nil
	}
	resolved, ferr := selectTypes(nc.Spec.Catalog, read.types)
	if ferr != nil {
		return verdict{reason: ferr.Reason, message: ferr.Message}, nil
	}
	nc.Status.Catalog = &v1alpha1.CatalogStatus{NodeTypes: resolved, Version: catalogVersion(resolved),
		Refreshed: &metav1.Time{Time: read.read}, ObservedGeneration: nc.Generation}
	if read.failure != nil {
		return c.staleOr(nc, refreshFailure(f.Name(), read.failure)), nil
	}
	return verdict{passed: true, reason: v1alpha1.ReasonCatalogResolved,
		message: fmt.Sprintf("%d node types selected from the %s catalogue", len(resolved), f.Name())}, nil
}

// catalogDue reports whether the catalogue is to be read now.
func catalogDue(read catalogRead, interval time.Duration, now time.Time) bool {
	switch {
	case read.attempted.IsZero():
		return true
	case read.failure != nil:
		return !now.Before(read.attempted.Add(failedCatalogRetry))
	}
	return !now.Before(read.read.Add(interval))
}

// catalogRequeue is how soon the class is to be reconciled again for its catalogue.
func (c *Controller) catalogRequeue(nc *v1alpha1.TofuNodeClass, recheck time.Duration) time.Duration {
	read, ok := c.catalogs.get(nc.UID)
	if nc.Spec.Catalog == nil || !ok {
		return recheck
	}
	next := read.read.Add(nc.Spec.Catalog.RefreshIntervalOrDefault())
	if read.failure != nil {
		next = read.attempted.Add(failedCatalogRetry)
	}
	return max(min(recheck, next.Sub(c.clock.Now())), time.Second)
}

// refreshFailure is CatalogReady's verdict when the catalogue could not be read: the family's
// reason (e.g. InvalidCredentials for a token that cannot read it) or CatalogRefreshFailed.
func refreshFailure(familyName string, err error) verdict {
	var fe *family.Error
	if errors.As(err, &fe) {
		return verdict{reason: fe.Reason, message: fmt.Sprintf("reading the %s catalogue: %s", familyName, fe.Message)}
	}
	return verdict{reason: v1alpha1.ReasonCatalogRefreshFailed, message: fmt.Sprintf("reading the %s catalogue: %v", familyName, err)}
}

// staleOr turns a failing verdict into a warning when the class has a last good list (that
// list stays in use), saying how old it is.
func (c *Controller) staleOr(nc *v1alpha1.TofuNodeClass, v verdict) verdict {
	last := nc.Status.Catalog
	if last == nil || len(last.NodeTypes) == 0 || last.Refreshed == nil {
		return v
	}
	v.unknown, v.advisory = false, true
	v.message = fmt.Sprintf("%s; keeping the last good list of %d node types, read %s ago", v.message,
		len(last.NodeTypes), message.Duration(c.clock.Since(last.Refreshed.Time).Truncate(time.Second)))
	return v
}

// selectTypes picks the catalogue's types that a selector of spec matches, keeps their
// offerings in spec's zones, and applies the overrides. It fails when an override names a
// type the catalogue does not have, or when nothing is selected.
func selectTypes(spec *v1alpha1.Catalog, all []family.CatalogType) ([]v1alpha1.NodeType, *family.Error) {
	known := map[string]bool{}
	for _, t := range all {
		known[t.NodeType.Name] = true
	}
	var unknown []string
	for _, o := range spec.Overrides {
		if !known[o.Name] {
			unknown = append(unknown, o.Name)
		}
	}
	if len(unknown) > 0 {
		return nil, family.Errorf(v1alpha1.ReasonUnknownOverride, "spec.catalog.overrides name types the catalogue does not have: %s",
			strings.Join(unknown, ", "))
	}
	var out []v1alpha1.NodeType
	for _, t := range all {
		if !slices.ContainsFunc(spec.Select, func(s v1alpha1.TypeSelector) bool { return selects(s, t) }) {
			continue
		}
		nt := *t.NodeType.DeepCopy()
		if len(spec.Zones) > 0 {
			nt.Offerings = slices.DeleteFunc(nt.Offerings, func(o v1alpha1.Offering) bool { return !slices.Contains(spec.Zones, o.Zone) })
		}
		if len(nt.Offerings) == 0 {
			continue
		}
		if i := slices.IndexFunc(spec.Overrides, func(o v1alpha1.TypeOverride) bool { return o.Name == nt.Name }); i >= 0 {
			applyOverride(&nt, &spec.Overrides[i])
		}
		out = append(out, nt)
	}
	if len(out) == 0 {
		zones := ""
		if len(spec.Zones) > 0 {
			zones = " in zones " + strings.Join(spec.Zones, ", ")
		}
		return nil, family.Errorf(v1alpha1.ReasonNoTypesSelected, "spec.catalog.select matches none of the catalogue's %d types%s", len(all), zones)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// selects reports whether a selector matches a catalogue type: every field it sets.
func selects(s v1alpha1.TypeSelector, t family.CatalogType) bool {
	nt := &t.NodeType
	// The nominal size; a family that gives none is bounded by the type's capacity.
	cores, mem := int64(t.Cores), t.Memory
	if cores == 0 {
		cores = nt.Capacity.Cpu().Value()
	}
	if mem.IsZero() {
		mem = *nt.Capacity.Memory()
	}
	switch {
	case len(s.Names) > 0 && !slices.Contains(s.Names, nt.Name),
		len(s.Series) > 0 && !slices.Contains(s.Series, t.Series),
		s.CPU != "" && s.CPU != t.CPU,
		s.Architecture != "" && s.Architecture != nt.ArchitectureOrDefault(),
		s.MinCPU != nil && cores < int64(*s.MinCPU),
		s.MaxCPU != nil && cores > int64(*s.MaxCPU),
		s.MinMemory != nil && mem.Cmp(*s.MinMemory) < 0,
		s.MaxMemory != nil && mem.Cmp(*s.MaxMemory) > 0:
		return false
	}
	return true
}

func applyOverride(nt *v1alpha1.NodeType, o *v1alpha1.TypeOverride) {
	if o.Price != "" {
		for i := range nt.Offerings {
			nt.Offerings[i].Price = o.Price
		}
	}
	if o.Overhead != nil {
		nt.Overhead = o.Overhead.DeepCopy()
	}
	if len(o.Labels) > 0 {
		if nt.Labels == nil {
			nt.Labels = map[string]string{}
		}
		maps.Copy(nt.Labels, o.Labels)
	}
	if len(o.Variables) > 0 {
		if nt.Variables == nil {
			nt.Variables = map[string]string{}
		}
		maps.Copy(nt.Variables, o.Variables)
	}
}

// catalogVersion identifies a resolved list: it changes whenever anything in it does.
func catalogVersion(types []v1alpha1.NodeType) string {
	data, _ := json.Marshal(types) // maps marshal with sorted keys: stable
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
