// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

// fulfillerLabels are the labels the fulfiller sets on every node from the claim's decision
// (nodeLabels, and Karpenter's own), with their deprecated aliases: a node type may not set
// them, or its nodes would say they are what they are not.
var fulfillerLabels = []string{
	corev1.LabelInstanceTypeStable, corev1.LabelInstanceType,
	corev1.LabelTopologyZone, corev1.LabelFailureDomainBetaZone,
	karpv1.CapacityTypeLabelKey,
	corev1.LabelArchStable, "beta.kubernetes.io/arch",
	corev1.LabelOSStable, "beta.kubernetes.io/os",
	karpv1.NodePoolLabelKey,
	corev1.LabelHostname,
}

// flagName is what a kubelet flag's name may be (as the CRD's pattern says).
var flagName = regexp.MustCompile(`^[a-z0-9][-a-z0-9]*$`)

// validateNodeTypeValues checks a node type's values as Kubernetes checks them: zones are
// label values (topology.kubernetes.io/zone), labels are qualified names with label values
// and none of the labels the fulfiller sets, a provider ID template names the node (or every
// claim of the type would get the same ID).
func validateNodeTypeValues(nt *v1alpha1.NodeType) []error {
	var errs []error
	where := "node type " + nt.Name
	if t := nt.ProviderIDTemplate; t != "" && !strings.Contains(t, "{name}") {
		errs = append(errs, fmt.Errorf("%s: providerIDTemplate %q must contain {name}, or every claim gets the same provider ID", where, t))
	}
	for _, o := range nt.Offerings {
		for _, msg := range validation.IsValidLabelValue(o.Zone) {
			errs = append(errs, fmt.Errorf("%s: offering zone %q: %s", where, o.Zone, msg))
		}
	}
	keys := make([]string, 0, len(nt.Labels))
	for k := range nt.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := nt.Labels[k]
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: label key %q: %s", where, k, strings.Join(msgs, "; ")))
			continue
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("%s: label %s value %q: %s", where, k, v, msg))
		}
		switch {
		case slices.Contains(fulfillerLabels, k):
			errs = append(errs, fmt.Errorf("%s: label %s is set by the fulfiller from the claim", where, k))
		case karpv1.IsRestrictedLabel(k) != nil:
			errs = append(errs, fmt.Errorf("%s: label %s is in a domain Karpenter reserves", where, k))
		}
	}
	return errs
}

// checkKubeletArgValues checks kubelet args as the kubelet's command line takes them: a flag
// name, and a value of one line (a newline or control character would start another flag in
// the machine's kubelet configuration).
func checkKubeletArgValues(where string, args []v1alpha1.KubeletArg) []error {
	var errs []error
	for _, a := range args {
		if !flagName.MatchString(a.Name) {
			errs = append(errs, fmt.Errorf("%s: kubelet arg %q: not a flag name (lower-case letters, digits and '-', without the leading dashes)", where, a.Name))
			continue
		}
		if strings.ContainsFunc(a.Value, unicode.IsControl) {
			errs = append(errs, fmt.Errorf("%s: kubelet arg %s: value must be one line without control characters", where, a.Name))
		}
	}
	return errs
}
