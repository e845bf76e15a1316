// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/bootstrap"
	"github.com/fulfiller-sh/fulfiller/internal/claims/classconfig"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/gates"
	"github.com/fulfiller-sh/fulfiller/internal/claims/fulfillment/run"
	"github.com/fulfiller-sh/fulfiller/internal/family"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// bootstrapStage mints the claim's bootstrap token, creates the BootReport its machine
// reports to and renders its user data, once: the same user data is passed to every apply of
// the claim (on Hetzner a change would replace the server).
type bootstrapStage struct {
	kube        client.Client
	apiReader   client.Reader
	clock       clock.Clock
	unavailable run.Unavailable
	namespace   string
	// serverVersion is the API server's version, the Kubernetes version installed when a
	// class names none.
	serverVersion func(context.Context) (string, error)
	// families give the labels besides the zone label that name a Node's zone in its cloud
	// (family.ZoneLabels).
	families family.Registry
}

func (b *bootstrapStage) reconcile(ctx context.Context, s *claimState) (reconcile.Result, error) {
	if s.F.Status.UserDataSecret != "" || s.Conds.IsTrue(v1alpha1.ConditionApplied) || failed(s) {
		return reconcile.Result{}, nil
	}
	if s.Class == nil || s.NodeType == nil {
		s.Conds.SetFalse(v1alpha1.ConditionApplied, v1alpha1.ReasonNodeClassNotFound, fmt.Sprintf("nodeclass %s or its node type %s is gone", s.F.Spec.NodeClass, s.F.Spec.NodeType))
		return reconcile.Result{}, nil
	}
	name := classconfig.UserDataSecretName(s.F)
	existing := &corev1.Secret{}
	err := b.apiReader.Get(ctx, client.ObjectKey{Namespace: b.namespace, Name: name}, existing)
	if err == nil {
		s.F.Status.UserDataSecret, s.F.Status.TokenID = name, existing.Annotations[classconfig.AnnotationTokenID]
		return reconcile.Result{}, nil
	}
	if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("reading user data secret: %w", err)
	}
	ca := &corev1.ConfigMap{}
	if err := b.apiReader.Get(ctx, client.ObjectKey{Namespace: b.namespace, Name: "kube-root-ca.crt"}, ca); err != nil {
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
	install, err := b.install(ctx, s.Class)
	if err != nil {
		return reconcile.Result{}, err
	}
	criSocket := s.Class.Spec.Bootstrap.CRISocket
	if criSocket == "" && install.Packages {
		criSocket = containerdSocket // what install.sh sets up
	}
	userData, err := bootstrap.RenderUserData(bootstrap.JoinSpec{
		APIServerEndpoint: s.Class.Spec.Bootstrap.APIServerEndpoint,
		Token:             tok,
		CACertHash:        caHash,
		NodeName:          s.F.Spec.NodeName,
		ProviderID:        s.F.Spec.ProviderID,
		ProviderIDFrom:    classconfig.ProviderIDSource(s.NodeType, s.F.Spec.ProviderID),
		Reservations:      classconfig.Reservations(s.NodeType),
		Labels:            kubeletLabels(nodeLabels(s, b.families)),
		Taints:            append([]corev1.Taint{karpv1.UnregisteredNoExecuteTaint}, gates.Taints(s.Class, s.NodeType)...),
		CRISocket:         criSocket,
		KubeletExtraArgs:  kubeletArgs(s.Class, s.NodeType),
		Install:           install,
		Report: &bootstrap.Report{
			URL:   bootstrap.ReportURL(s.Class.Spec.Bootstrap.APIServerEndpoint, v1alpha1.Group, v1alpha1.SchemeGroupVersion.Version, b.namespace, s.F.Name),
			CAPEM: []byte(ca.Data["ca.crt"]),
		},
		ExtraCloudConfig: s.Class.Spec.Bootstrap.ExtraCloudConfig,
		UserDataLimit:    userDataLimit(s.NodeType),
	})
	if reason := renderFailure(err); reason != "" {
		// The same inputs fail for every claim of this type: no machine, no token, and the
		// offering is not tried again for a while.
		b.unavailable.MarkUnavailable(s.F.Spec.NodeType, s.F.Spec.Zone, s.F.Spec.CapacityType)
		s.Conds.SetFalse(v1alpha1.ConditionApplied, reason, err.Error())
		s.Events = append(s.Events, userDataFailedEvent(s.F, reason, err.Error()))
		if s.claim != nil {
			s.Events = append(s.Events, userDataFailedEvent(s.claim, reason, err.Error()))
		}
		s.Replace = true
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := b.bootReport(ctx, s.F, tok); err != nil {
		return reconcile.Result{}, err
	}
	ttl := s.Class.TokenTTL()
	labels := map[string]string{keys.LabelNodeClaim: s.F.Name}
	expires := b.clock.Now().Add(ttl)
	tokenSecret := bootstrap.TokenSecret(tok, bootstrap.TokenSecretOptions{
		Expires:     expires,
		Description: "fulfiller join token of nodeclaim " + s.F.Name,
		Labels:      labels,
		Groups:      []string{bootstrap.DefaultGroup, bootstrap.ReportGroup},
	})
	if err := b.kube.Create(ctx, tokenSecret); err != nil {
		return reconcile.Result{}, fmt.Errorf("creating bootstrap token: %w", err)
	}
	udLabels := classconfig.UserDataLabels()
	udLabels[keys.LabelNodeClaim] = s.F.Name
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: b.namespace, Name: name, Labels: udLabels,
			Annotations: map[string]string{classconfig.AnnotationTokenID: tok.ID},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{classconfig.UserDataKey: userData},
	}
	if err := b.kube.Create(ctx, secret); err != nil {
		return reconcile.Result{}, fmt.Errorf("creating user data secret: %w", err)
	}
	s.F.Status.UserDataSecret, s.F.Status.TokenID = name, tok.ID
	s.UserData, s.tokenExpires = string(userData), expires
	return reconcile.Result{}, nil
}

// containerdSocket is containerd's CRI socket.
const containerdSocket = "unix:///run/containerd/containerd.sock"

// install is how the class's machines get their node software: with packages, of the
// class's Kubernetes version, or the API server's when it names none.
func (b *bootstrapStage) install(ctx context.Context, nc *v1alpha1.TofuNodeClass) (bootstrap.Install, error) {
	if nc.Spec.Bootstrap.InstallOrDefault() != v1alpha1.InstallPackages {
		return bootstrap.Install{}, nil
	}
	version := nc.Spec.Bootstrap.KubernetesVersion
	if version == "" {
		if b.serverVersion == nil {
			return bootstrap.Install{}, errors.New("the class names no kubernetesVersion and the API server's version is unknown")
		}
		v, err := b.serverVersion(ctx)
		if err != nil {
			return bootstrap.Install{}, fmt.Errorf("reading the API server's version for the node software: %w", err)
		}
		version = v
	}
	return bootstrap.Install{Packages: true, KubernetesVersion: version}, nil
}

// bootReport creates the claim's BootReport, which the machine's token (tok) may write, owned
// by the Fulfillment so that it goes with it. One left by an attempt whose token was not
// kept (the user data Secret was not written) is replaced: its token ID cannot change.
func (b *bootstrapStage) bootReport(ctx context.Context, f *v1alpha1.Fulfillment, tok bootstrap.Token) error {
	report := &v1alpha1.BootReport{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.namespace, Name: f.Name, Labels: map[string]string{keys.LabelNodeClaim: f.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(f, v1alpha1.SchemeGroupVersion.WithKind("Fulfillment"))}},
		Spec: v1alpha1.BootReportSpec{TokenID: tok.ID},
	}
	err := b.kube.Create(ctx, report)
	if apierrors.IsAlreadyExists(err) {
		old := &v1alpha1.BootReport{ObjectMeta: metav1.ObjectMeta{Namespace: b.namespace, Name: f.Name}}
		if err := b.kube.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing the boot report: %w", err)
		}
		err = b.kube.Create(ctx, report)
	}
	if err != nil {
		return fmt.Errorf("creating the boot report: %w", err)
	}
	return nil
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

func userDataLimit(nt *v1alpha1.NodeType) int64 {
	if nt.UserDataLimit == nil {
		return 0
	}
	return nt.UserDataLimit.Value()
}

// nodeLabels are the labels the Node is born with: the node type's, its family's names of its
// zone (a CSI driver's topology key), and over them the NodeClaim's own (its NodePool template's labels, the pool and class, the single values of
// its requirements), which Karpenter would otherwise sync only after registration, too late
// for an admission policy, a DaemonSet or a scheduler rule that selects on them. The labels
// Karpenter sets to mark its own progress are left to Karpenter.
func nodeLabels(s *claimState, families family.Registry) map[string]string {
	labels := classconfig.NodeLabels(s.NodeType, s.F)
	maps.Copy(labels, families.NodeZoneLabels(s.Class.Spec.Family, s.F.Spec.Zone))
	if s.claim == nil {
		return labels
	}
	for k, v := range s.claim.Labels {
		switch k {
		case karpv1.NodeRegisteredLabelKey, karpv1.NodeInitializedLabelKey:
			continue
		}
		labels[k] = v
	}
	return labels
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
