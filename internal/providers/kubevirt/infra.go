// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fulfiller-sh/fulfiller/api/v1alpha1"
	"github.com/fulfiller-sh/fulfiller/internal/family"
)

// The environment variables the kubectl provider reads the infra cluster from
// (modules/kubevirt's README), which a class's spec.credentials provide.
const (
	envHost          = "KUBE_HOST"
	envToken         = "KUBE_TOKEN"
	envCACert        = "KUBE_CLUSTER_CA_CERT_DATA"
	envClientCert    = "KUBE_CLIENT_CERT_DATA"
	envClientKey     = "KUBE_CLIENT_KEY_DATA"
	envUser          = "KUBE_USER"
	envPassword      = "KUBE_PASSWORD"
	envInsecure      = "KUBE_INSECURE"
	envTLSServerName = "KUBE_TLS_SERVER_NAME"
	envProxyURL      = "KUBE_PROXY_URL"
)

// Module parameters the family reads (modules/kubevirt's parameters).
const (
	paramNamespace      = "namespace"
	paramStorageClass   = "storage_class"
	paramKubeconfigPath = "kubeconfig_path"
)

// parameters are the module parameters of a node type of the class: the class's variables
// with the type's over them, as the runs get them.
func parameters(nc *v1alpha1.TofuNodeClass, nodeType string) map[string]string {
	p := maps.Clone(nc.Spec.Variables)
	if p == nil {
		p = map[string]string{}
	}
	if nt, ok := nc.NodeType(nodeType); ok {
		maps.Copy(p, nt.Variables)
	}
	return p
}

// claimParameters are the module parameters of a claim's runs: those recorded at Create
// (spec.settings), or, for a Fulfillment made before they were recorded, its class's as it is
// now; what the family chose for the claim (spec.parameters) over them.
func claimParameters(nc *v1alpha1.TofuNodeClass, f *v1alpha1.Fulfillment) map[string]string {
	var p map[string]string
	switch {
	case f.Spec.Settings != nil:
		p = maps.Clone(f.Spec.Settings.Parameters)
	case nc != nil:
		p = parameters(nc, f.Spec.NodeType)
	}
	if p == nil {
		p = map[string]string{}
	}
	maps.Copy(p, f.Spec.Parameters)
	return p
}

// restConfig is the infra cluster's client configuration from the class's credentials, read
// as the kubectl provider reads them: KUBE_HOST and the rest from the environment, else the
// kubeconfig file parameters.kubeconfig_path names (if the controller can read it). No host
// is a *family.Error (InfraKubeconfigMissing).
func restConfig(env map[string]string, kubeconfigPath string) (*rest.Config, error) {
	if env[envHost] == "" {
		if kubeconfigPath == "" {
			return nil, family.Errorf(v1alpha1.ReasonInfraKubeconfigMissing,
				"the credentials hold no %s and parameters.kubeconfig_path is empty: the infra cluster is unknown", envHost)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
		if err != nil {
			return nil, family.Errorf(v1alpha1.ReasonInfraKubeconfigMissing,
				"the credentials hold no %s and parameters.kubeconfig_path %s cannot be read by the controller: %v", envHost, kubeconfigPath, err)
		}
		return cfg, nil
	}
	cfg := &rest.Config{
		Host:        env[envHost],
		BearerToken: env[envToken],
		Username:    env[envUser],
		Password:    env[envPassword],
		TLSClientConfig: rest.TLSClientConfig{
			CAData:     []byte(env[envCACert]),
			CertData:   []byte(env[envClientCert]),
			KeyData:    []byte(env[envClientKey]),
			ServerName: env[envTLSServerName],
		},
	}
	if v := env[envInsecure]; v != "" {
		insecure, err := strconv.ParseBool(v)
		if err != nil {
			return nil, family.Errorf(v1alpha1.ReasonInvalidCredentials, "%s is %q, not a boolean", envInsecure, v)
		}
		cfg.Insecure = insecure
		if insecure {
			cfg.CAData = nil
		}
	}
	if v := env[envProxyURL]; v != "" {
		proxy, err := parseProxyURL(v)
		if err != nil {
			return nil, err
		}
		cfg.Proxy = http.ProxyURL(proxy)
	}
	return cfg, nil
}

// parseProxyURL parses KUBE_PROXY_URL. Its user info may hold a password, so an error shows
// neither the URL nor a part of it.
func parseProxyURL(v string) (*url.URL, error) {
	u, err := url.Parse(v)
	if err == nil && u.Scheme != "" && u.Host != "" {
		return u, nil
	}
	why := "it needs a scheme and a host"
	if err != nil {
		why = "it does not parse"
	}
	return nil, family.Errorf(v1alpha1.ReasonInvalidCredentials, "%s is not a proxy URL (%s); its value is not shown, its user info may hold a password", envProxyURL, why)
}

// infraScheme holds the kinds the family reads on an infra cluster.
var infraScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, storagev1.AddToScheme, authorizationv1.AddToScheme, virtv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // static types: a programming error
		}
	}
	return s
}()

// infraMapper maps those kinds without asking the infra cluster (no discovery per client).
var infraMapper = func() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(virtv1.VirtualMachineGroupVersionKind, meta.RESTScopeNamespace)
	m.Add(virtv1.VirtualMachineInstanceGroupVersionKind, meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Secret"), meta.RESTScopeNamespace)
	m.Add(storagev1.SchemeGroupVersion.WithKind("StorageClass"), meta.RESTScopeRoot)
	m.Add(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview"), meta.RESTScopeRoot)
	return m
}()

// infraClients keeps one client per infra identity (credentials, or a kubeconfig path: a file
// whose content changes is read again only after the cache starts over), so that watching
// many claims of a class reuses one connection pool.
type infraClients struct {
	mu    sync.Mutex
	byKey map[string]client.Client
}

// maxClients bounds the cache; beyond it, it starts over (credentials rotate rarely).
const maxClients = 64

// forScope returns the infra cluster's client for a class's node type.
func (cs *infraClients) forScope(s family.Scope, nodeType string) (client.Client, map[string]string, error) {
	return cs.forParameters(s.Env, parameters(s.Class, nodeType))
}

// forParameters returns the infra cluster's client for credentials env and module parameters
// params (their kubeconfig_path).
func (cs *infraClients) forParameters(env, params map[string]string) (client.Client, map[string]string, error) {
	key := identityKey(env, params[paramKubeconfigPath])
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c, ok := cs.byKey[key]; ok {
		return c, params, nil
	}
	cfg, err := restConfig(env, params[paramKubeconfigPath])
	if err != nil {
		return nil, params, err
	}
	c, err := client.New(cfg, client.Options{Scheme: infraScheme, Mapper: infraMapper})
	if err != nil {
		return nil, params, family.Errorf(v1alpha1.ReasonInvalidCredentials, "the infra cluster's credentials cannot be used: %v", err)
	}
	if cs.byKey == nil || len(cs.byKey) >= maxClients {
		cs.byKey = map[string]client.Client{}
	}
	cs.byKey[key] = c
	return c, params, nil
}

// identityKey identifies an infra identity without holding its secrets.
func identityKey(env map[string]string, kubeconfigPath string) string {
	keys := []string{envHost, envToken, envCACert, envClientCert, envClientKey, envUser, envPassword, envInsecure, envTLSServerName, envProxyURL}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%d:%s;", k, len(env[k]), env[k])
	}
	fmt.Fprintf(h, "kubeconfig=%s", kubeconfigPath)
	return hex.EncodeToString(h.Sum(nil))
}
