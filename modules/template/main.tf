# A starting point for a node-type module; see modules/README.md for the contract. Replace
# terraform_data with the machine's resource (a server, a VM) and keep the rest:
#   - one machine per apply, named after var.node_name;
#   - var.user_data as its cloud-init user data, given once at creation: with a real
#     resource, add `lifecycle { ignore_changes = [user_data] }` so that a new token never
#     replaces a running machine;
#   - var.labels on the machine, so that what a claim left behind can be found.

locals {
  image = lookup(var.parameters, "image", "ubuntu-24.04")
}

resource "terraform_data" "machine" {
  input = {
    name   = var.node_name
    type   = var.node_type
    zone   = var.zone
    image  = local.image
    labels = var.labels
  }
}
