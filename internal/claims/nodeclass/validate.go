// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
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

// reservedKubeletArgs are set by the fulfiller; a NodeClass may not set them.
var reservedKubeletArgs = []string{"provider-id", "node-labels", "register-with-taints",
	bootstrap.ArgKubeReserved, bootstrap.ArgSystemReserved, bootstrap.ArgEvictionHard}

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

// validateSpec checks what the CRD schema cannot: a family this binary knows, prices,
// capacities, unique zones.
func validateSpec(spec *v1alpha1.TofuNodeClassSpec, families family.Registry) error {
	var errs []error
	if !families.Knows(spec.Family) {
		errs = append(errs, fmt.Errorf("family %s is not built into this controller (it knows %s)", spec.Family, strings.Join(families.Names(), ", ")))
	}
	if len(spec.ErrorRules) > 0 && spec.Family != "" {
		errs = append(errs, fmt.Errorf("errorRules are for a class without a family; family %s classifies errors with its own rules", spec.Family))
	}
	if _, err := tfrunner.CompileErrorRules(classconfig.ErrorRules(spec.ErrorRules)); err != nil {
		errs = append(errs, fmt.Errorf("errorRules: %w", err))
	}
	for _, nt := range spec.NodeTypes {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := nt.Capacity[r]; !ok || q.Sign() <= 0 {
				errs = append(errs, fmt.Errorf("node type %s: capacity.%s must be set and positive", nt.Name, r))
			}
		}
		seen := map[string]bool{}
		for _, o := range nt.Offerings {
			key := o.Zone + "/" + o.CapacityTypeOrDefault()
			if seen[key] {
				errs = append(errs, fmt.Errorf("node type %s: offering %s listed twice", nt.Name, key))
			}
			seen[key] = true
			if _, err := strconv.ParseFloat(o.Price, 64); err != nil {
				errs = append(errs, fmt.Errorf("node type %s: offering %s: price %q is not a number", nt.Name, o.Zone, o.Price))
			}
		}
		if nt.JoinTimeout != nil && nt.JoinTimeout.Duration <= 0 {
			errs = append(errs, fmt.Errorf("node type %s: joinTimeout must be positive", nt.Name))
		}
		for name, d := range map[string]*metav1.Duration{"apply": nt.Deadlines.Apply, "cni": nt.Deadlines.CNI, "gpu": nt.Deadlines.GPU, "custom": nt.Deadlines.Custom} {
			if d != nil && d.Duration <= 0 {
				errs = append(errs, fmt.Errorf("node type %s: deadlines.%s must be positive", nt.Name, name))
			}
		}
		errs = append(errs, checkKubeletArgs("node type "+nt.Name, nt.KubeletExtraArgs)...)
		errs = append(errs, validateNodeTypeValues(&nt)...)
		if err := classconfig.Reservations(&nt).Validate(); err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				errs = append(errs, fmt.Errorf("node type %s: %w", nt.Name, e))
			}
		}
		if nt.ProviderIDFrom != nil && nt.ProviderIDTemplate != "" {
			errs = append(errs, fmt.Errorf("node type %s: providerIDTemplate and providerIDFrom exclude each other", nt.Name))
		} else if src := classconfig.ProviderIDSource(&nt, nt.ProviderIDTemplate); src != nil {
			if err := src.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("node type %s: providerIDFrom: %w", nt.Name, err))
			}
		}
		if nt.UserDataLimit != nil && nt.UserDataLimit.Sign() <= 0 {
			errs = append(errs, fmt.Errorf("node type %s: userDataLimit must be positive", nt.Name))
		}
	}
	errs = append(errs, checkKubeletArgs("bootstrap", spec.Bootstrap.KubeletExtraArgs)...)
	if err := bootstrap.ValidateExtraCloudConfig(spec.Bootstrap.ExtraCloudConfig); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap.extraCloudConfig: %w", err))
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

func checkKubeletArgs(where string, args []v1alpha1.KubeletArg) []error {
	errs := checkKubeletArgValues(where, args)
	for _, a := range args {
		if slices.Contains(reservedKubeletArgs, a.Name) {
			errs = append(errs, fmt.Errorf("%s: kubelet arg %s is set by the fulfiller", where, a.Name))
		}
	}
	return errs
}
