# The module contract (modules/README.md): the fulfiller passes these inputs through the
# variables file it writes for each claim. Declare only the ones the module uses; keep the
# types, and keep user_data sensitive.

variable "node_name" {
  description = "Name of the node (the NodeClaim's name): name the machine after it."
  type        = string
  nullable    = false
}

variable "node_type" {
  description = "Node type (node.kubernetes.io/instance-type) Karpenter chose."
  type        = string
  nullable    = false
}

variable "zone" {
  description = "Zone (topology.kubernetes.io/zone) of the offering Karpenter chose."
  type        = string
  nullable    = false
}

variable "user_data" {
  description = "Cloud-init user data with the claim's kubeadm join token: give it to the machine once, never on a command line or in an output."
  type        = string
  sensitive   = true
  nullable    = false
}

variable "labels" {
  description = "Labels that attribute the machine to this cluster, claim, class and NodePool: put them on the machine for orphan collection."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "parameters" {
  description = "The class's spec.variables with the node type's variables over them (all strings). Ignore keys the module does not know."
  type        = map(string)
  default     = {}
  nullable    = false
}
