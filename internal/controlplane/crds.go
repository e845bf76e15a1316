// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"context"
	"fmt"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/fulfiller-sh/fulfiller/api/crds"
)

// DefaultCRDs are the CRDs every control plane of the project carries: Karpenter's, from the
// pinned module, and the fulfiller's.
func DefaultCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return append(append([]*apiextensionsv1.CustomResourceDefinition{}, karpenterapis.CRDs...), crds.CRDs()...)
}

// installCRDs creates (or updates) each CRD and waits until the API server serves it: the CRD
// is established and API discovery lists its resource in every served version.
func installCRDs(ctx context.Context, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building apiextensions client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building discovery client: %w", err)
	}
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		crd = crd.DeepCopy()
		existing, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, crd, metav1.CreateOptions{})
		case err == nil:
			crd.ResourceVersion = existing.ResourceVersion
			_, err = api.Update(ctx, crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be established: %w", crd.Name, err)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := crd.Spec.Group + "/" + v.Name
			err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				list, err := disc.ServerResourcesForGroupVersion(gv)
				if err != nil {
					return false, nil
				}
				return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Spec.Names.Plural }), nil
			})
			if err != nil {
				return fmt.Errorf("waiting for API discovery to list %s in %s: %w", crd.Spec.Names.Plural, gv, err)
			}
		}
	}
	return nil
}
