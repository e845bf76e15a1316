// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"fmt"
	"strings"

	"github.com/awslabs/operatorpkg/status"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/message"
)

// classCheck is one check of a class: the condition it sets, and what decides it. Ready is
// composed of the checks, in order: the generic ones (checks), then those of the class's
// family (familyChecks), each with its own condition.
type classCheck struct {
	condition string
	check     func(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error)
}

// verdict is what one check found: passed, or failed with a reason and a message that say
// what is wrong, or unknown (the check could not be made yet) with a reason and message. An
// advisory verdict sets its condition as a warning that Ready does not count.
type verdict struct {
	passed, unknown, advisory bool
	reason, message           string
}

var passed = verdict{passed: true}

func failedCheck(reason string, err error) verdict {
	return verdict{reason: reason, message: err.Error()}
}

// checks are the class's checks, in the order of v1alpha1.ClassChecks; a class with a
// catalogue has CatalogReady after CredentialsReady. A check may resolve what the class's
// status shows (the catalogue's node types) on the class it is given, which the later checks
// see.
func (c *Controller) checks(nc *v1alpha1.TofuNodeClass) []classCheck {
	checks := []classCheck{
		{v1alpha1.ConditionSpecValid, func(_ context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			if err := validateSpec(&nc.Spec, c.families); err != nil {
				return failedCheck(v1alpha1.ReasonInvalidSpec, err), nil
			}
			return passed, nil
		}},
		{v1alpha1.ConditionModuleValid, c.moduleCheck},
		{v1alpha1.ConditionBackendReady, func(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			_, err := classconfig.ReadBackend(ctx, c.apiReader, c.secretNamespace, nc.Spec.Backend)
			return configVerdict(err)
		}},
		{v1alpha1.ConditionCredentialsReady, func(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			env, err := classconfig.ReadCredentials(ctx, c.apiReader, c.secretNamespace, nc.Spec.Credentials)
			if err != nil {
				return configVerdict(err)
			}
			return c.checkFamilyCredentials(ctx, nc, env)
		}},
	}
	if nc.Spec.Catalog != nil {
		checks = append(checks, classCheck{v1alpha1.ConditionCatalogReady, c.catalogCheck})
	}
	return append(checks, []classCheck{
		{v1alpha1.ConditionJoinPreflight, func(ctx context.Context, _ *v1alpha1.TofuNodeClass) (verdict, error) {
			failure, err := c.preflight(ctx)
			switch {
			case err != nil:
				return verdict{}, err
			case failure != nil:
				return verdict{reason: failure.Reason, message: failure.Message}, nil
			}
			return passed, nil
		}},
		{v1alpha1.ConditionNodeTypesLaunchable, func(_ context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			misfits, launchable := registrationWindowCheck(nc.NodeTypes())
			switch {
			case launchable == 0 && len(misfits) == 0:
				return verdict{reason: v1alpha1.ReasonNoTypesSelected, message: "the class has no node types yet"}, nil
			case launchable == 0:
				return verdict{reason: v1alpha1.ReasonExceedsRegistrationWindow, message: misfitMessage(misfits)}, nil
			}
			return verdict{passed: true, reason: v1alpha1.ReasonLaunchable}, nil
		}},
	}...)
}

// configVerdict is the verdict of reading the class's Secrets: a ConfigError fails the check
// with its reason, another error is the reconcile's.
func configVerdict(err error) (verdict, error) {
	if err == nil {
		return passed, nil
	}
	if ce, ok := classconfig.AsConfigError(err); ok {
		return verdict{reason: ce.Reason, message: ce.Message}, nil
	}
	return verdict{}, err
}

// setVerdict sets a check's condition.
func setVerdict(conds status.ConditionSet, condition string, v verdict) {
	switch {
	case v.unknown:
		conds.SetUnknownWithReason(condition, v.reason, v.message)
	case !v.passed:
		conds.SetFalse(condition, v.reason, v.message)
	case v.reason != "":
		conds.SetTrueWithReason(condition, v.reason, v.message)
	default:
		conds.SetTrue(condition)
	}
}

// composeReady sets Ready from the checks' conditions, in order: True when all are, otherwise
// the status, reason and message of the first that is not, so that `kubectl get
// tofunodeclasses` says what is wrong.
func composeReady(conds status.ConditionSet, order []string) *status.Condition {
	for _, t := range order {
		switch c := conds.Get(t); {
		case c == nil:
			conds.SetUnknown(status.ConditionReady)
			return conds.Root()
		case !c.IsTrue():
			conds.Set(status.Condition{Type: status.ConditionReady, Status: c.Status, Reason: c.Reason, Message: c.Message})
			return conds.Root()
		}
	}
	conds.SetTrue(status.ConditionReady)
	return conds.Root()
}

// misfitMessage names the node types that cannot register within Karpenter's window.
func misfitMessage(misfits []string) string {
	return fmt.Sprintf("node types %s cannot register within Karpenter's %s registration window; they are not launchable",
		strings.Join(misfits, ", "), message.Duration(classconfig.RegistrationWindow))
}

// registrationWindowCheck names the node types whose apply deadline and join timeout cannot
// fit Karpenter's fixed 15-minute registration window: Karpenter would delete their claims
// before a slow machine registers, so their offerings are not launchable.
func registrationWindowCheck(nodeTypes []v1alpha1.NodeType) (misfits []string, launchable int) {
	for i := range nodeTypes {
		if ok, why := classconfig.RegistrationFit(&nodeTypes[i]); !ok {
			misfits = append(misfits, why)
		} else {
			launchable++
		}
	}
	return misfits, launchable
}
