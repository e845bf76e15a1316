// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package nodeclass

import (
	"context"
	"errors"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// familyChecks are the checks of the class's family (family.ClassChecker), each with its own
// condition, run with the class's scope. While the class's credentials cannot be read, they
// are unknown.
func (c *Controller) familyChecks(nc *v1alpha1.TofuNodeClass) []classCheck {
	f, ok := classconfig.Family(c.families, nc)
	if !ok {
		return nil
	}
	checker, ok := f.(family.ClassChecker)
	if !ok {
		return nil
	}
	var out []classCheck
	for _, chk := range checker.ClassChecks() {
		out = append(out, classCheck{condition: chk.Condition, check: func(ctx context.Context, nc *v1alpha1.TofuNodeClass) (verdict, error) {
			env, err := classconfig.ReadCredentials(ctx, c.apiReader, c.secretNamespace, nc.Spec.Credentials)
			if ce, ok := classconfig.AsConfigError(err); ok {
				return verdict{unknown: true, reason: ce.Reason, message: "waiting for the credentials: " + ce.Message}, nil
			}
			if err != nil {
				return verdict{}, err
			}
			return familyVerdict(chk.Run(ctx, family.Scope{Class: nc, Env: env, Cluster: c.cluster}))
		}})
	}
	return out
}

// familyVerdict is the verdict of a family's answer: nil passes, a *family.Error fails with
// its reason; another error is the reconcile's.
func familyVerdict(err error) (verdict, error) {
	var fe *family.Error
	switch {
	case err == nil:
		return passed, nil
	case errors.As(err, &fe):
		return verdict{reason: fe.Reason, message: fe.Message}, nil
	}
	return verdict{}, err
}
