// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package classconfig

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ReadCredentials reads the Secrets of a class's spec.credentials into the runs'
// environment; later Secrets win on equal keys. Errors are ConfigErrors of CredentialsReady whose messages name
// Secrets and keys, never values.
func ReadCredentials(ctx context.Context, reader client.Reader, namespace string, sources []v1alpha1.CredentialsSource) (map[string]string, error) {
	env := map[string]string{}
	for _, src := range sources {
		secret := &corev1.Secret{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: src.SecretName}, secret)
		if apierrors.IsNotFound(err) {
			return nil, credentialsError(v1alpha1.ReasonCredentialsMissing, fmt.Sprintf("credentials secret %s/%s not found", namespace, src.SecretName))
		}
		if err != nil {
			return nil, fmt.Errorf("reading secret %s/%s: %w", namespace, src.SecretName, err)
		}
		if secret.Labels[v1alpha1.LabelCredentials] != "true" {
			return nil, credentialsError(v1alpha1.ReasonCredentialsNotOptedIn, fmt.Sprintf("credentials secret %s/%s is not labelled %s=true: label it to let classes pass it to their runs",
				namespace, src.SecretName, v1alpha1.LabelCredentials))
		}
		keys := make([]string, 0, len(secret.Data))
		for k := range secret.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !envName.MatchString(k) {
				return nil, credentialsError(v1alpha1.ReasonInvalidCredentialsSecret, fmt.Sprintf("credentials secret %s/%s: key %q is not an environment variable name", namespace, src.SecretName, k))
			}
			env[k] = string(secret.Data[k])
		}
		// terraform-exec refuses to run tofu with these set by hand (it sets them itself).
		if refused := tfexec.ProhibitedEnv(env); len(refused) > 0 {
			sort.Strings(refused)
			return nil, credentialsError(v1alpha1.ReasonInvalidCredentialsSecret, fmt.Sprintf("credentials secret %s/%s: keys %s are set by the fulfiller for tofu and cannot be credentials",
				namespace, src.SecretName, strings.Join(refused, ", ")))
		}
	}
	return env, nil
}
