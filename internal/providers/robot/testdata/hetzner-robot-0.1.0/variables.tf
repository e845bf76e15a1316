# The fulfiller's module contract (modules/README.md): these inputs come from the variables file
# the runner writes for each claim.

variable "node_name" {
  description = "Name of the node (the NodeClaim's name); the hostname of a cold install."
  type        = string
  nullable    = false

  validation {
    condition     = length(var.node_name) <= 63 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.node_name))
    error_message = "node_name must be a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit."
  }
}

variable "user_data" {
  description = "Cloud-init user data with the kubeadm JoinConfiguration and its bootstrap token. Written 0600 into the run's folder by one provisioner and read (then removed) by `fulfiller robot activate`; never on a command line."
  type        = string
  sensitive   = true
  nullable    = false

  validation {
    condition     = startswith(var.user_data, "#cloud-config\n") || startswith(var.user_data, "H4sI")
    error_message = "user_data must be a #cloud-config document, or one gzipped and base64-encoded."
  }
}

variable "labels" {
  description = "Labels of the claim. A dedicated server has nowhere to put them; accepted for the contract's sake."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "parameters" {
  description = "The leased server and how to activate it, from the controller and the NodeClass; see README.md. Unknown keys are ignored."
  type        = map(string)
  default     = {}
  nullable    = false

  validation {
    condition     = can(regex("^[1-9][0-9]*$", lookup(var.parameters, "server_number", "")))
    error_message = "parameters.server_number is required: the number of the Robot server leased to this claim."
  }
  validation {
    condition     = contains(["warm", "cold"], lookup(var.parameters, "activation_path", "warm"))
    error_message = "parameters.activation_path must be \"warm\" or \"cold\"."
  }
  validation {
    condition     = lookup(var.parameters, "activation_path", "warm") != "warm" || can(regex("^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa) [A-Za-z0-9+/=]+$", lookup(var.parameters, "host_key", "")))
    error_message = "parameters.host_key is required for a warm activation: the host key recorded at the server's install, in authorized_keys format (\"ssh-ed25519 AAAA...\")."
  }
  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", lookup(var.parameters, "inventory_namespace", "")))
    error_message = "parameters.inventory_namespace is required: the namespace of the inventory leases, where new host keys are recorded."
  }
  validation {
    condition     = can(regex("^[0-9]+$", lookup(var.parameters, "ssh_port", "22")))
    error_message = "parameters.ssh_port must be a port number."
  }
  validation {
    condition = alltrue([
      for k in ["rescue_timeout", "install_timeout", "warm_timeout", "poll_interval"] :
      can(regex("^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", lookup(var.parameters, k, "1s")))
    ])
    error_message = "parameters.rescue_timeout, install_timeout, warm_timeout and poll_interval must be Go durations such as 500ms, 10m or 1h30m."
  }
  validation {
    condition     = can(regex("^/dev/[a-z0-9]+(,/dev/[a-z0-9]+)*$", lookup(var.parameters, "drives", "/dev/sda")))
    error_message = "parameters.drives must be a comma-separated list of block devices such as /dev/sda,/dev/sdb or /dev/nvme0n1,/dev/nvme1n1."
  }
}
