# The fulfiller's module contract (modules/README.md): these inputs come from the variables file
# the runner writes for each claim.

variable "node_name" {
  description = "Name of the node (the NodeClaim's name): the VirtualMachine's name and the last part of its provider ID."
  type        = string
  nullable    = false

  validation {
    condition     = length(var.node_name) <= 63 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.node_name))
    error_message = "node_name must be a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit."
  }
}

variable "node_type" {
  description = "Node type (node.kubernetes.io/instance-type); a label on the VirtualMachine."
  type        = string
  nullable    = false

  validation {
    condition     = length(var.node_type) > 0
    error_message = "node_type must not be empty."
  }
}

variable "user_data" {
  description = "Cloud-init user data with the kubeadm JoinConfiguration and its bootstrap token. It goes into the cloud-init Secret (key userdata), never inline: KubeVirt limits inline userData to 2048 bytes."
  type        = string
  sensitive   = true
  nullable    = false

  validation {
    condition     = startswith(var.user_data, "#cloud-config\n") || startswith(var.user_data, "H4sI")
    error_message = "user_data must be a #cloud-config document, or one gzipped and base64-encoded."
  }
}

variable "labels" {
  description = "Labels of the claim's node (instance type, zone, capacity type, the node type's labels); put on the VirtualMachine, its VMI and the cloud-init Secret."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "parameters" {
  description = "The VM's shape and placement on the infra cluster, from the NodeClass and the node type; see README.md. Unknown keys are ignored."
  type        = map(string)
  default     = {}
  nullable    = false

  validation {
    condition     = length(lookup(var.parameters, "namespace", "")) <= 63 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", lookup(var.parameters, "namespace", "")))
    error_message = "parameters.namespace is required: the infra cluster's namespace of the VMs, a DNS label."
  }
  validation {
    condition     = lookup(var.parameters, "image", "") != ""
    error_message = "parameters.image is required: the containerDisk image, or with storage_class the registry image the DataVolume imports (e.g. quay.io/containerdisks/ubuntu:24.04)."
  }
  validation {
    condition     = alltrue([for k in ["cpu_cores", "cpu_sockets", "cpu_threads"] : can(regex("^[1-9][0-9]*$", lookup(var.parameters, k, "1")))])
    error_message = "parameters.cpu_cores, cpu_sockets and cpu_threads must be positive whole numbers."
  }
  validation {
    condition     = alltrue([for k in ["memory", "disk_size"] : can(regex("^[0-9]+(\\.[0-9]+)?(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$", lookup(var.parameters, k, "1Gi")))])
    error_message = "parameters.memory and disk_size must be Kubernetes quantities such as 8Gi."
  }
  validation {
    condition     = can(regex("^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$", lookup(var.parameters, "storage_class", "")))
    error_message = "parameters.storage_class must be a storage class name."
  }
  validation {
    condition     = contains(["", "ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"], lookup(var.parameters, "disk_access_mode", ""))
    error_message = "parameters.disk_access_mode must be ReadWriteOnce, ReadWriteMany, ReadOnlyMany or ReadWriteOncePod (or empty: the storage profile decides)."
  }
  validation {
    condition     = contains(["true", "false"], lookup(var.parameters, "pod_network", "true")) && contains(["true", "false"], lookup(var.parameters, "dedicated_cpu", "false"))
    error_message = "parameters.pod_network and dedicated_cpu must be \"true\" or \"false\"."
  }
  validation {
    condition = alltrue([
      for n in compact(split(",", replace(lookup(var.parameters, "multus_networks", ""), " ", ""))) :
      can(regex("^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$", n))
    ]) && (lookup(var.parameters, "pod_network", "true") == "true" || lookup(var.parameters, "multus_networks", "") != "")
    error_message = "parameters.multus_networks must be a comma-separated list of [namespace/]name NetworkAttachmentDefinitions, and a VM without the pod network needs at least one."
  }
  validation {
    condition     = can(regex("^[0-9]+$", lookup(var.parameters, "gpu_count", "0"))) && (lookup(var.parameters, "gpu_count", "0") == "0" || lookup(var.parameters, "gpu_device_name", "") != "")
    error_message = "parameters.gpu_count must be a whole number, and GPUs need gpu_device_name (the device plugin's resource, e.g. nvidia.com/GA102GL_A10)."
  }
  validation {
    condition = alltrue([
      for d in concat([lookup(var.parameters, "gpu_device_name", "")], split(",", lookup(var.parameters, "host_devices", ""))) :
      can(regex("^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$", trimspace(d)))
    ])
    error_message = "parameters.gpu_device_name and host_devices (comma-separated) must be device plugin resource names such as nvidia.com/GA102GL_A10."
  }
  validation {
    condition = (
      can(tomap(jsondecode(lookup(var.parameters, "node_selector", "{}")))) &&
      startswith(trimspace(lookup(var.parameters, "tolerations", "[]")), "[") && can(jsondecode(lookup(var.parameters, "tolerations", "[]"))) &&
      startswith(trimspace(lookup(var.parameters, "affinity", "{}")), "{") && can(keys(jsondecode(lookup(var.parameters, "affinity", "{}"))))
    )
    error_message = "parameters.node_selector and affinity must be JSON objects, tolerations a JSON array (as in a pod spec)."
  }
  validation {
    condition     = contains(["", "None", "LiveMigrate", "LiveMigrateIfPossible", "External"], lookup(var.parameters, "eviction_strategy", ""))
    error_message = "parameters.eviction_strategy must be None, LiveMigrate, LiveMigrateIfPossible or External (or empty: the cluster's default)."
  }
  validation {
    condition     = can(regex("^[0-9]+$", lookup(var.parameters, "termination_grace_period", "30")))
    error_message = "parameters.termination_grace_period must be a whole number of seconds."
  }
  validation {
    condition     = length(lookup(var.parameters, "cluster_name", "")) <= 63 && can(regex("^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$", lookup(var.parameters, "cluster_name", "")))
    error_message = "parameters.cluster_name must be a label value (at most 63 characters)."
  }
}
