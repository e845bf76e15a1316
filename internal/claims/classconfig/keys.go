// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/keys"
)

// FinalizerDestroy keeps a Fulfillment until its machine is destroyed and its state removed.
const FinalizerDestroy = v1alpha1.Group + "/destroy"

// AnnotationProviderID on a claim announces the provider ID its apply reported, when the node
// type's could not be predicted: the update makes Karpenter call Create again, which then
// returns it.
const AnnotationProviderID = v1alpha1.Group + "/provider-id"

const (
	// UserDataKey is the key of the user data in its Secret.
	UserDataKey = "user-data"
	// AnnotationTokenID records which token a user data Secret carries.
	AnnotationTokenID = v1alpha1.Group + "/token-id"
)

// UserDataSecretName is the name of the claim's user data Secret.
func UserDataSecretName(f *v1alpha1.Fulfillment) string { return f.Name + "-userdata" }

// UserDataLabels mark a user data Secret as the fulfiller's (with keys.LabelNodeClaim, its claim's):
// the orphan collector deletes no other.
func UserDataLabels() map[string]string {
	return map[string]string{keys.LabelManagedBy: keys.ManagedBy, "app.kubernetes.io/component": "user-data"}
}
