terraform {
  required_version = ">= 1.12.0"

  required_providers {
    # kubectl_manifest applies any manifest, custom resources included, without a schema of
    # its own; KubeVirt's own provider is not used.
    kubectl = {
      source  = "gavinbunney/kubectl"
      version = "= 1.19.0"
    }
  }
}

# The infra cluster, from the environment (the class's spec.credentials): KUBE_HOST with
# KUBE_TOKEN, or KUBE_CLIENT_CERT_DATA and KUBE_CLIENT_KEY_DATA, and KUBE_CLUSTER_CA_CERT_DATA
# (also KUBE_INSECURE, KUBE_TLS_SERVER_NAME, KUBE_PROXY_URL). A kubeconfig file is read only
# when parameters.kubeconfig_path names one: KUBE_CONFIG_PATH is the state backend's (the
# management cluster's), not the infra cluster's. The runner keeps these KUBE_* variables
# from the kubernetes state backend (its settings they would override are set empty).
provider "kubectl" {
  load_config_file  = local.p.kubeconfig_path != ""
  config_path       = local.p.kubeconfig_path != "" ? local.p.kubeconfig_path : null
  apply_retry_count = 3
}
