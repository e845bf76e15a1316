// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package run

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
	"github.com/fulfiller-sh/fulfiller/internal/tfrunner"
)

// request builds the runner request of one operation of a claim.
func (r *Runs) request(ctx context.Context, c *Claim, op tfrunner.Operation, attempt int) (tfrunner.Request, error) {
	userData := c.UserData
	if userData == "" && c.F.Status.UserDataSecret != "" {
		secret := &corev1.Secret{}
		err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: c.F.Status.UserDataSecret}, secret)
		switch {
		case err == nil:
			userData = string(secret.Data[classconfig.UserDataKey])
		case !apierrors.IsNotFound(err) || op == tfrunner.Apply:
			return tfrunner.Request{}, fmt.Errorf("reading user data: %w", err)
		}
	}
	settings := r.Settings(c)
	params := maps.Clone(settings.Parameters)
	if params == nil {
		params = map[string]string{}
	}
	// What the family chose for this claim (a leased machine) over the class's variables.
	maps.Copy(params, c.F.Spec.Parameters)
	labels := maps.Clone(settings.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// For the module to label its machine as this cluster's, the claim's and the class's: a
	// family's inventory finds it by them, and the orphan collector proves it ours.
	labels[keys.LabelNodeClaim] = c.F.Name
	labels[keys.LabelNodeClass] = c.F.Spec.NodeClass
	if r.opts.ClusterName != "" {
		labels[keys.LabelCluster] = r.opts.ClusterName
	}
	backend, workspace, backendEnv, err := r.backend(ctx, c)
	if err != nil {
		return tfrunner.Request{}, err
	}
	credentials, err := classconfig.ReadCredentials(ctx, r.apiReader, r.opts.Namespace, settings.Credentials)
	if err != nil {
		return tfrunner.Request{}, err
	}
	env := maps.Clone(r.opts.RunEnv)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, credentials)
	maps.Copy(env, backendEnv)
	// Every run is bounded: the runner interrupts tofu at the deadline (it releases its lock)
	// and the run fails with class Timeout.
	deadline := r.opts.DestroyDeadline
	if op == tfrunner.Apply {
		deadline = settings.ApplyDeadlineOrDefault()
	}
	return tfrunner.Request{
		Deadline:      deadline,
		Name:          Name(c.F, op, attempt),
		Operation:     op,
		Family:        familyName(c),
		ErrorRules:    errorRules(c),
		ModuleDir:     moduleDir(c.F.Spec.Module),
		ModuleSource:  moduleSource(c.F.Spec.Module),
		ModuleVersion: c.F.Spec.ModuleVersion,
		ModuleDigest:  c.F.Spec.ModuleDigest,
		Backend:       backend,
		Workspace:     workspace,
		Variables: map[string]any{
			tfrunner.VarNodeName:   c.F.Spec.NodeName,
			tfrunner.VarNodeType:   c.F.Spec.NodeType,
			tfrunner.VarZone:       c.F.Spec.Zone,
			tfrunner.VarUserData:   userData,
			tfrunner.VarLabels:     labels,
			tfrunner.VarParameters: params,
		},
		Env:       env,
		TofuPath:  r.opts.TofuPath,
		Shortcuts: r.opts.RunnerShortcuts,
		// The runner Job and its pod carry the claim's name: kubectl get jobs -l karpenter.sh/nodeclaim=<claim>;
		// and its UID, so that an earlier claim's run of the same name is never taken for this one's.
		Labels:      map[string]string{keys.LabelNodeClaim: c.F.Name, keys.LabelNodeClaimUID: c.F.Spec.NodeClaimUID},
		LockTimeout: 30 * time.Second,
	}, nil
}

// moduleDir and moduleSource are the claim's recorded module as a run takes it: a folder as
// it is, a remote source (pinned at Create) fetched by the run.
func moduleDir(module string) string {
	if tfrunner.IsLocalSource(module) {
		return module
	}
	return ""
}

func moduleSource(module string) string {
	if tfrunner.IsLocalSource(module) {
		return ""
	}
	return module
}

// errorRules are the class's own error rules, for a generic module (none when the class is
// gone or has a family).
func errorRules(c *Claim) []tfrunner.ErrorRule {
	if c.Class == nil || c.Class.Spec.Family != "" {
		return nil
	}
	return classconfig.ErrorRules(c.Class.Spec.ErrorRules)
}

// familyName is the node-type family of the claim's class, whose error rules classify its
// runs (generic when the class is gone).
func familyName(c *Claim) string {
	if c.Class != nil {
		return c.Class.Spec.Family
	}
	return ""
}

// stateNamespace is where the claim's state lives (kubernetes backend): the backend namespace
// the claim recorded (its class's, or the controller's state namespace).
func (r *Runs) stateNamespace(c *Claim) string {
	return classconfig.StateNamespace(r.Settings(c).Backend, r.opts.StateNamespace)
}

// Settings are what the claim's runs use: as Create recorded them (classconfig.RunSettings).
func (r *Runs) Settings(c *Claim) *v1alpha1.RunSettings {
	return classconfig.RunSettings(c.F, c.Class, c.NodeType, r.opts.StateNamespace)
}
