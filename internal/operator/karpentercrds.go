// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
)

// KarpenterCoreVersionAnnotation marks the Karpenter CRDs the fulfiller-crd chart ships with
// the version of Karpenter core they come from. Karpenter's own CRDs carry no mark of their
// version (only controller-gen's), so CheckKarpenterCRDs compares schemas and uses the mark
// only to say where a CRD came from.
const KarpenterCoreVersionAnnotation = "fulfiller.sh/karpenter-core-version"

const karpenterModule = "sigs.k8s.io/karpenter"

// KarpenterCoreVersion is the version of the Karpenter core module built into this binary.
func KarpenterCoreVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	for _, dep := range info.Deps {
		if dep.Path == karpenterModule {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "(unknown)"
}

// KarpenterCRDError is a cluster whose Karpenter CRDs are missing or not those of the
// embedded Karpenter core.
type KarpenterCRDError struct {
	// Version is the embedded Karpenter core's version.
	Version string
	// Problems say, per CRD, what is missing or different.
	Problems []string
}

func (e *KarpenterCRDError) Error() string {
	return fmt.Sprintf("the cluster's Karpenter CRDs are not those of Karpenter core %s, which this controller embeds: %s; "+
		"install Karpenter core %s's CRDs with the fulfiller-crd chart of this release (docs/install.md, docs/upgrade.md)",
		e.Version, strings.Join(e.Problems, "; "), e.Version)
}

// CheckKarpenterCRDs compares each CRD of want (Karpenter core's, sigs.k8s.io/karpenter/pkg/apis.CRDs)
// with the one the cluster serves: its names, its scope and every version (schema,
// subresources, printer columns, served and storage). Core of one version writes and reads
// fields its own CRDs declare: a cluster's CRD of another version prunes some of them or
// validates others differently, and claims lose data without an error. It returns a
// *KarpenterCRDError naming each difference, and retries other errors (the API server not
// reachable yet) for up to a minute.
func CheckKarpenterCRDs(ctx context.Context, crds apiextensionsclient.CustomResourceDefinitionInterface, want []*apiextensionsv1.CustomResourceDefinition, version string) error {
	var problems []string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		problems, lastErr = nil, nil
		for _, w := range want {
			// A list by name needs the rights Karpenter's informers have (list), not get.
			list, err := crds.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", w.Name).String()})
			if err != nil {
				lastErr = fmt.Errorf("reading CRD %s: %w", w.Name, err)
				return false, nil
			}
			if len(list.Items) == 0 {
				problems = append(problems, w.Name+": not installed")
				continue
			}
			got := &list.Items[0]
			if got.DeletionTimestamp != nil {
				problems = append(problems, w.Name+": being deleted")
				continue
			}
			diffs, err := crdDifferences(w, got, version)
			if err != nil {
				return false, err
			}
			if len(diffs) == 0 {
				continue
			}
			const shown = 5
			p := w.Name + ": " + strings.Join(diffs[:min(len(diffs), shown)], ", ")
			if len(diffs) > shown {
				p += fmt.Sprintf(" and %d more differences", len(diffs)-shown)
			}
			if v := got.Annotations[KarpenterCoreVersionAnnotation]; v != "" && v != version {
				p += fmt.Sprintf(" (it is marked as Karpenter core %s's)", v)
			}
			problems = append(problems, p)
		}
		return true, nil
	})
	switch {
	case err != nil && lastErr != nil:
		return lastErr
	case err != nil:
		return fmt.Errorf("checking Karpenter's CRDs: %w", err)
	case len(problems) > 0:
		return &KarpenterCRDError{Version: version, Problems: problems}
	}
	return nil
}

// crdDifferences lists where got differs from want: names, scope, and each version by name.
// Each is a path in the version's schema (properties only) or the CRD, and which side has it.
func crdDifferences(want, got *apiextensionsv1.CustomResourceDefinition, version string) ([]string, error) {
	var diffs []string
	ours, theirs := "only in Karpenter core "+version+"'s", "only in the cluster's"
	for _, part := range []struct {
		name      string
		want, got any
	}{
		{"names", want.Spec.Names, got.Spec.Names},
		{"scope", want.Spec.Scope, got.Spec.Scope},
		{"group", want.Spec.Group, got.Spec.Group},
	} {
		a, b, err := normalized(part.want, part.got)
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(a, b) {
			diffs = append(diffs, part.name+" differ")
		}
	}
	for _, w := range want.Spec.Versions {
		i := slices.IndexFunc(got.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == w.Name })
		if i < 0 {
			diffs = append(diffs, "version "+w.Name+" "+ours)
			continue
		}
		a, b, err := normalized(w, got.Spec.Versions[i])
		if err != nil {
			return nil, err
		}
		var paths []pathDiff
		diffPaths(a, b, nil, &paths)
		for _, p := range paths {
			side := "differs"
			switch {
			case p.onlyWant:
				side = ours
			case p.onlyGot:
				side = theirs
			}
			diffs = append(diffs, fmt.Sprintf("version %s: %s %s", w.Name, p.path(), side))
		}
	}
	for _, g := range got.Spec.Versions {
		if !slices.ContainsFunc(want.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == g.Name }) {
			diffs = append(diffs, "version "+g.Name+" "+theirs)
		}
	}
	return diffs, nil
}

// normalized turns a and b into plain JSON values (maps, slices, strings, numbers), so that
// what the API server re-encoded (a schema's defaults, its examples) compares by value.
func normalized(a, b any) (any, any, error) {
	var out [2]any
	for i, v := range []any{a, b} {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding a CRD: %w", err)
		}
		if err := json.Unmarshal(data, &out[i]); err != nil {
			return nil, nil, fmt.Errorf("decoding a CRD: %w", err)
		}
	}
	return out[0], out[1], nil
}

// pathDiff is one place where two JSON values differ.
type pathDiff struct {
	segments          []string
	onlyWant, onlyGot bool
}

// path is the place as a reader of the CRD names it: a field of the schema as
// spec.template.spec (without schema.openAPIV3Schema and the properties between), anything
// else as its path in the version.
func (p pathDiff) path() string {
	segs := p.segments
	if len(segs) >= 2 && segs[0] == "schema" && segs[1] == "openAPIV3Schema" {
		var fields []string
		rest := segs[2:]
		for len(rest) >= 2 && rest[0] == "properties" {
			fields = append(fields, rest[1])
			rest = rest[2:]
		}
		name := strings.Join(fields, ".")
		if name == "" {
			name = "the schema's root"
		}
		if len(rest) > 0 {
			name += " (" + strings.Join(rest, ".") + ")"
		}
		return name
	}
	return strings.Join(segs, ".")
}

// diffPaths walks a and b together and records the first point of difference on each path.
func diffPaths(a, b any, at []string, out *[]pathDiff) {
	here := func(onlyA, onlyB bool) {
		*out = append(*out, pathDiff{segments: slices.Clone(at), onlyWant: onlyA, onlyGot: onlyB})
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			here(false, false)
			return
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range av {
				if !yield(k) {
					return
				}
			}
			for k := range bv {
				if _, dup := av[k]; !dup && !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			x, inA := av[k]
			y, inB := bv[k]
			switch {
			case !inB:
				*out = append(*out, pathDiff{segments: append(slices.Clone(at), k), onlyWant: true})
			case !inA:
				*out = append(*out, pathDiff{segments: append(slices.Clone(at), k), onlyGot: true})
			default:
				diffPaths(x, y, append(at, k), out)
			}
		}
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			here(false, false)
			return
		}
		for i := range av {
			diffPaths(av[i], bv[i], append(at, strconv.Itoa(i)), out)
		}
	default:
		if !reflect.DeepEqual(a, b) {
			here(false, false)
		}
	}
}
