// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
)

const (
	// UserDataKey is the key of the user data in its Secret.
	UserDataKey = "user-data"
	// annotationTokenID records which token a user data Secret carries.
	annotationTokenID = v1alpha1.Group + "/token-id"
)

// bootstrapStage mints the claim's bootstrap token and renders its user data, once: the same
// user data is passed to every apply of the claim (on Hetzner a change would replace the
// server).
type bootstrapStage struct{ c *FulfillmentController }

func (b *bootstrapStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if s.f.Status.UserDataSecret != "" || s.conds.IsTrue(v1alpha1.ConditionApplied) || failed(s) {
		return reconcile.Result{}, nil
	}
	if s.nc == nil || s.nt == nil {
		s.conds.SetFalse(v1alpha1.ConditionApplied, v1alpha1.ReasonNodeClassNotFound, fmt.Sprintf("nodeclass %s or its node type %s is gone", s.f.Spec.NodeClass, s.f.Spec.NodeType))
		return reconcile.Result{}, nil
	}
	name := userDataSecretName(s.f)
	existing := &corev1.Secret{}
	err := b.c.apiReader.Get(ctx, client.ObjectKey{Namespace: b.c.opts.Namespace, Name: name}, existing)
	if err == nil {
		s.f.Status.UserDataSecret, s.f.Status.TokenID = name, existing.Annotations[annotationTokenID]
		return reconcile.Result{}, nil
	}
	if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("reading user data secret: %w", err)
	}
	ca := &corev1.ConfigMap{}
	if err := b.c.apiReader.Get(ctx, client.ObjectKey{Namespace: b.c.opts.Namespace, Name: "kube-root-ca.crt"}, ca); err != nil {
		return reconcile.Result{}, fmt.Errorf("reading the cluster CA: %w", err)
	}
	caHash, err := bootstrap.CACertHash([]byte(ca.Data["ca.crt"]))
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("hashing the cluster CA: %w", err)
	}
	tok, err := bootstrap.NewToken()
	if err != nil {
		return reconcile.Result{}, err
	}
	userData, err := bootstrap.RenderUserData(bootstrap.JoinSpec{
		APIServerEndpoint: s.nc.Spec.Bootstrap.APIServerEndpoint,
		Token:             tok,
		CACertHash:        caHash,
		NodeName:          s.f.Spec.NodeName,
		ProviderID:        s.f.Spec.ProviderID,
		ProviderIDFrom:    providerIDSource(s.nt, s.f.Spec.ProviderID),
		Reservations:      reservations(s.nt),
		Labels:            kubeletLabels(nodeLabels(s.nt, s.f)),
		Taints:            append([]corev1.Taint{karpv1.UnregisteredNoExecuteTaint}, GateTaints(s.nc, s.nt)...),
		CRISocket:         s.nc.Spec.Bootstrap.CRISocket,
		KubeletExtraArgs:  kubeletArgs(s.nc, s.nt),
		ExtraCloudConfig:  s.nc.Spec.Bootstrap.ExtraCloudConfig,
		UserDataLimit:     userDataLimit(s.nt),
	})
	if reason := renderFailure(err); reason != "" {
		// The same inputs fail for every claim of this type: no machine, no token, and the
		// offering is not tried again for a while.
		b.c.unavailable.MarkUnavailable(s.f.Spec.NodeType, s.f.Spec.Zone, s.f.Spec.CapacityType)
		s.conds.SetFalse(v1alpha1.ConditionApplied, reason, err.Error())
		s.events = append(s.events, userDataFailedEvent(s.f, reason, err.Error()))
		if s.claim != nil {
			s.events = append(s.events, userDataFailedEvent(s.claim, reason, err.Error()))
		}
		s.replaceClaim = true
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	ttl := s.nc.TokenTTL()
	labels := map[string]string{LabelNodeClaim: s.f.Name}
	expires := b.c.clock.Now().Add(ttl)
	tokenSecret := bootstrap.TokenSecret(tok, bootstrap.TokenSecretOptions{
		Expires:     expires,
		Description: "fulfiller join token of nodeclaim " + s.f.Name,
		Labels:      labels,
	})
	if err := b.c.kube.Create(ctx, tokenSecret); err != nil {
		return reconcile.Result{}, fmt.Errorf("creating bootstrap token: %w", err)
	}
	udLabels := userDataLabels()
	udLabels[LabelNodeClaim] = s.f.Name
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: b.c.opts.Namespace, Name: name, Labels: udLabels,
			Annotations: map[string]string{annotationTokenID: tok.ID},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{UserDataKey: userData},
	}
	if err := b.c.kube.Create(ctx, secret); err != nil {
		return reconcile.Result{}, fmt.Errorf("creating user data secret: %w", err)
	}
	s.f.Status.UserDataSecret, s.f.Status.TokenID = name, tok.ID
	s.minted = minted{userData: string(userData), tokenExpires: expires}
	return reconcile.Result{}, nil
}

// renderFailure maps an error of RenderUserData to the reason of a claim that cannot get a
// machine; "" for other errors.
func renderFailure(err error) string {
	switch {
	case errors.Is(err, bootstrap.ErrUserDataTooLarge):
		return v1alpha1.ReasonUserDataTooLarge
	case errors.Is(err, bootstrap.ErrInvalidCloudConfig):
		return v1alpha1.ReasonInvalidExtraCloudConfig
	}
	return ""
}

// kubeletArgs are the class's kubelet args with the node type's over them, by name.
func kubeletArgs(nc *v1alpha1.TofuNodeClass, nt *v1alpha1.NodeType) []bootstrap.Arg {
	var out []bootstrap.Arg
	index := map[string]int{}
	for _, list := range [][]v1alpha1.KubeletArg{nc.Spec.Bootstrap.KubeletExtraArgs, nt.KubeletExtraArgs} {
		for _, a := range list {
			if i, ok := index[a.Name]; ok {
				out[i].Value = a.Value
				continue
			}
			index[a.Name] = len(out)
			out = append(out, bootstrap.Arg{Name: a.Name, Value: a.Value})
		}
	}
	return out
}

// reservedKubeletArgs are set by the fulfiller; a NodeClass may not set them.
var reservedKubeletArgs = []string{"provider-id", "node-labels", "register-with-taints",
	bootstrap.ArgKubeReserved, bootstrap.ArgSystemReserved, bootstrap.ArgEvictionHard}

// providerIDSource is where a machine reads its provider ID when it is not known at render
// time (known is empty): the node type's providerIDFrom, with Hetzner Cloud's defaults.
func providerIDSource(nt *v1alpha1.NodeType, known string) *bootstrap.ProviderIDSource {
	if known != "" {
		return nil
	}
	from := nt.ProviderIDFromOrDefault()
	return &bootstrap.ProviderIDSource{URL: from.MetadataURL, Prefix: from.Prefix}
}

// reservations are what the type's kubelets keep from pods; Karpenter's instance type
// subtracts the same (instanceType).
func reservations(nt *v1alpha1.NodeType) bootstrap.Reservations {
	return bootstrap.Reservations{KubeReserved: nt.Overhead, SystemReserved: nt.SystemReserved, EvictionHard: nt.EvictionHard}
}

func userDataLimit(nt *v1alpha1.NodeType) int64 {
	if nt.UserDataLimit == nil {
		return 0
	}
	return nt.UserDataLimit.Value()
}

func userDataSecretName(f *v1alpha1.Fulfillment) string { return f.Name + "-userdata" }

// userDataLabels mark a user data Secret as the fulfiller's (with LabelNodeClaim, its claim's):
// the orphan collector deletes no other.
func userDataLabels() map[string]string {
	return map[string]string{bootstrap.LabelManagedBy: bootstrap.ManagedBy, "app.kubernetes.io/component": "user-data"}
}

// kubeletLabels keeps the labels a kubelet may set on its own Node under NodeRestriction;
// Karpenter syncs the others at registration.
func kubeletLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if kubeletMaySet(k) {
			out[k] = v
		}
	}
	return out
}

func kubeletMaySet(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	restricted := prefix == "kubernetes.io" || strings.HasSuffix(prefix, ".kubernetes.io") ||
		prefix == "k8s.io" || strings.HasSuffix(prefix, ".k8s.io")
	if !restricted {
		return true
	}
	switch key {
	case corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyRegion, corev1.LabelInstanceTypeStable,
		corev1.LabelOSStable, corev1.LabelArchStable, corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
		corev1.LabelInstanceType, corev1.LabelWindowsBuild:
		return true
	}
	return prefix == "kubelet.kubernetes.io" || prefix == "node.kubernetes.io" ||
		strings.HasSuffix(prefix, ".kubelet.kubernetes.io") || strings.HasSuffix(prefix, ".node.kubernetes.io")
}
