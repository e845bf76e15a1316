# The fulfiller's module contract (modules/README.md): these inputs come from the variables file
# the runner writes for each claim.

variable "node_name" {
  description = "Name of the node (the NodeClaim's name): the server's name and hostname, and the Node's name."
  type        = string
  nullable    = false

  validation {
    condition     = length(var.node_name) <= 63 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.node_name))
    error_message = "node_name must be a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit."
  }
}

variable "node_type" {
  description = "Node type (node.kubernetes.io/instance-type); the Hetzner Cloud server type unless parameters.server_type names another."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", var.node_type)) && length(var.node_type) <= 63
    error_message = "node_type must be a Kubernetes label value of lower-case letters, digits, '-' and '.'."
  }
}

variable "zone" {
  description = "Zone (topology.kubernetes.io/zone): the Hetzner Cloud location the server is created in (fsn1, nbg1, hel1, ash, hil, sin)."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*$", var.zone))
    error_message = "zone must be a Hetzner Cloud location name such as fsn1 or nbg1."
  }
}

variable "user_data" {
  description = "Cloud-init user data with the kubeadm JoinConfiguration and its bootstrap token, passed to the server once (see lifecycle in main.tf)."
  type        = string
  sensitive   = true
  nullable    = false

  validation {
    condition     = length(var.user_data) <= 32768
    error_message = "user_data must be at most 32 KiB, Hetzner Cloud's limit (a node type's userDataLimit makes the fulfiller gzip it)."
  }
  validation {
    condition     = startswith(var.user_data, "#cloud-config\n") || startswith(var.user_data, "H4sI")
    error_message = "user_data must be a #cloud-config document, or one gzipped and base64-encoded."
  }
}

variable "labels" {
  description = "Labels of the claim (instance type, zone, capacity type, the NodePool as karpenter.sh/nodepool, ...). The NodePool becomes a server label."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "parameters" {
  description = "Settings of the server, from the NodeClass's and the node type's variables (all strings); see README.md. Unknown keys are ignored."
  type        = map(string)
  default     = {}
  nullable    = false

  validation {
    condition     = lookup(var.parameters, "cluster", "") == "" || (length(lookup(var.parameters, "cluster", "")) <= 63 && can(regex("^[a-zA-Z0-9]([a-zA-Z0-9._-]*[a-zA-Z0-9])?$", lookup(var.parameters, "cluster", ""))))
    error_message = "parameters.cluster, when set, is the cluster's name, labelled on every server (at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)."
  }
  validation {
    condition     = length(trimspace(lookup(var.parameters, "image", "ubuntu-24.04"))) > 0
    error_message = "parameters.image must name an image or an image ID."
  }
  validation {
    condition     = can(regex("^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$", lookup(var.parameters, "server_type", "")))
    error_message = "parameters.server_type must be a server type name such as cx23."
  }
  validation {
    condition = alltrue([
      for k in ["network_id", "placement_group_id"] : can(regex("^([1-9][0-9]*)?$", lookup(var.parameters, k, "")))
    ])
    error_message = "parameters.network_id and placement_group_id must be numeric IDs."
  }
  validation {
    condition     = can(regex("^([1-9][0-9]*-[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2})?$", lookup(var.parameters, "subnet_id", "")))
    error_message = "parameters.subnet_id must be a subnet ID as the provider writes it: <network-id>-<ip-range>, e.g. 4711-10.0.1.0/24."
  }
  validation {
    condition     = lookup(var.parameters, "network_id", "") == "" || lookup(var.parameters, "subnet_id", "") == ""
    error_message = "parameters.network_id and subnet_id exclude each other: subnet_id names the network too."
  }
  validation {
    condition     = can(regex("^([1-9][0-9]*(,[1-9][0-9]*)*)?$", replace(lookup(var.parameters, "firewall_ids", ""), " ", "")))
    error_message = "parameters.firewall_ids must be a comma-separated list of firewall IDs."
  }
  validation {
    condition     = can(regex("^([0-9]+(ms|s|m))?$", lookup(var.parameters, "poll_interval", "")))
    error_message = "parameters.poll_interval must be a duration in whole ms, s or m, such as 500ms or 5s."
  }
  validation {
    condition     = contains(["", "constant", "exponential"], lookup(var.parameters, "poll_function", ""))
    error_message = "parameters.poll_function must be constant or exponential."
  }
  validation {
    condition     = alltrue([for k in split(",", lookup(var.parameters, "ssh_keys", "")) : can(regex("^[^\\s]*$", trimspace(k)))])
    error_message = "parameters.ssh_keys must be a comma-separated list of SSH key names or IDs."
  }
  validation {
    condition     = alltrue([for k in ["enable_ipv4", "enable_ipv6"] : contains(["true", "false"], lookup(var.parameters, k, "true"))])
    error_message = "parameters.enable_ipv4 and enable_ipv6 must be \"true\" or \"false\"."
  }
  validation {
    condition = (lookup(var.parameters, "enable_ipv4", "true") == "true" || lookup(var.parameters, "enable_ipv6", "true") == "true" ||
    lookup(var.parameters, "network_id", "") != "")
    error_message = "a server without public IPv4 and IPv6 needs parameters.network_id, the private network it is reached on (it is started once attached)."
  }
}
