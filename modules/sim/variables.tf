# The fulfiller's module contract (modules/README.md): these inputs come from the variables file
# the runner writes for each claim.

variable "node_name" {
  description = "Name of the node (the NodeClaim's name); also the machine's hostname and the last part of its provider ID."
  type        = string
  nullable    = false

  validation {
    condition     = length(var.node_name) <= 63 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.node_name))
    error_message = "node_name must be a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit."
  }
}

variable "node_type" {
  description = "Node type (node.kubernetes.io/instance-type) the machine is created as; named in simulated capacity errors."
  type        = string
  nullable    = false

  validation {
    condition     = length(var.node_type) > 0
    error_message = "node_type must not be empty."
  }
}

variable "zone" {
  description = "Zone (topology.kubernetes.io/zone) the machine is created in; named in simulated capacity errors."
  type        = string
  nullable    = false

  validation {
    condition     = length(var.zone) > 0
    error_message = "zone must not be empty."
  }
}

variable "user_data" {
  description = "Cloud-init user data with the kubeadm JoinConfiguration and its bootstrap token. Written 0600 into the machine's state dir, never onto a command line."
  type        = string
  sensitive   = true
  nullable    = false

  validation {
    condition     = startswith(var.user_data, "#cloud-config\n") || startswith(var.user_data, "H4sI")
    error_message = "user_data must be a #cloud-config document, or one gzipped and base64-encoded."
  }
}

variable "labels" {
  description = "Labels of the claim (the cluster, the claim, the class, the NodePool, the node's labels), kept in the machine's state dir as labels.json: the simulated family's inventory attributes the machine by them."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "parameters" {
  description = "Settings of the simulated machine and its simulated cloud, from the NodeClass and the node type; see README.md. Unknown keys are ignored."
  type        = map(string)
  default     = {}
  nullable    = false

  validation {
    condition     = can(regex("^/.", var.parameters["sim_dir"]))
    error_message = "parameters.sim_dir is required: an absolute folder under which each machine keeps its state dir."
  }
  validation {
    condition     = contains(["", "capacity", "quota", "invalid", "credentials", "transient"], lookup(var.parameters, "apply_error", ""))
    error_message = "parameters.apply_error must be \"\", \"capacity\", \"quota\", \"invalid\", \"credentials\" or \"transient\"."
  }
  validation {
    condition     = contains(["true", "false"], lookup(var.parameters, "never_join", "false"))
    error_message = "parameters.never_join must be \"true\" or \"false\"."
  }
  validation {
    condition = alltrue([
      for k in ["cpu", "memory", "ephemeral_storage"] :
      can(regex("^[0-9]+(\\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$", lookup(var.parameters, k, "1")))
    ])
    error_message = "parameters.cpu, memory and ephemeral_storage must be Kubernetes quantities such as 2, 500m or 8Gi."
  }
  validation {
    condition     = alltrue([for k in ["pods", "gpu_count"] : can(regex("^[0-9]+$", lookup(var.parameters, k, "0")))])
    error_message = "parameters.pods and gpu_count must be whole numbers."
  }
  validation {
    condition     = can(regex("^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$", lookup(var.parameters, "gpu_resource", "")))
    error_message = "parameters.gpu_resource must be an extended resource name such as nvidia.com/gpu."
  }
  validation {
    condition     = can(regex("^(0|([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$", lookup(var.parameters, "boot_delay", "0s")))
    error_message = "parameters.boot_delay must be a Go duration such as 0s, 1500ms or 2m."
  }
  validation {
    condition     = alltrue([for k in ["cni_delay", "gpu_delay"] : can(regex("^(0|([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$", lookup(var.parameters, k, "0s")))])
    error_message = "parameters.cni_delay and gpu_delay must be Go durations such as 0s, 15s or 2m."
  }
  validation {
    condition     = alltrue([for k in ["cni_never", "gpu_never"] : contains(["true", "false"], lookup(var.parameters, k, "false"))])
    error_message = "parameters.cni_never and gpu_never must be \"true\" or \"false\"."
  }
  validation {
    condition     = can(regex("^[0-9]+(\\.[0-9]+)?$", lookup(var.parameters, "apply_delay", "0")))
    error_message = "parameters.apply_delay must be a number of seconds."
  }
}
