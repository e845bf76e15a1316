# A Hetzner Cloud server that joins the cluster as one node. See README.md.

locals {
  p = var.parameters

  server_type = lookup(local.p, "server_type", "") != "" ? local.p.server_type : var.node_type
  image       = trimspace(lookup(local.p, "image", "ubuntu-24.04"))
  # A label selector picks the newest snapshot it matches instead of image (a pre-baked image
  # from images/hetzner-cloud, e.g. "fulfiller.sh/kubernetes-version=v1.36.3").
  image_selector = trimspace(lookup(local.p, "image_selector", ""))
  ssh_keys       = compact([for k in split(",", lookup(local.p, "ssh_keys", "")) : trimspace(k)])
  firewall_ids   = [for id in compact(split(",", replace(lookup(local.p, "firewall_ids", ""), " ", ""))) : tonumber(id)]
  network_id     = lookup(local.p, "network_id", "")
  subnet_id      = lookup(local.p, "subnet_id", "")
  placement      = lookup(local.p, "placement_group_id", "")
  enable_ipv4    = lookup(local.p, "enable_ipv4", "true") == "true"
  enable_ipv6    = lookup(local.p, "enable_ipv6", "true") == "true"
  poll_interval  = lookup(local.p, "poll_interval", "") != "" ? local.p.poll_interval : "5s"
  poll_function  = lookup(local.p, "poll_function", "") != "" ? local.p.poll_function : "exponential"

  # Hetzner label values: at most 63 characters, alphanumeric at both ends. A NodePool name
  # may be a longer DNS subdomain: it is cut to fit.
  nodepool = replace(substr(lookup(var.labels, "karpenter.sh/nodepool", ""), 0, 63), "/[-._]+$/", "")

  # The cluster's name: the fulfiller passes it in labels (FULFILLER_CLUSTER_NAME);
  # parameters.cluster is for callers that do not.
  cluster = lookup(var.labels, "fulfiller.sh/cluster", "") != "" ? var.labels["fulfiller.sh/cluster"] : lookup(local.p, "cluster", "")

  # The claim and the class, from the fulfiller's labels: the family's inventory attributes
  # the server by them (and by the cluster), so the orphan collector can prove it ours.
  attribution = { for k in ["karpenter.sh/nodeclaim", "fulfiller.sh/nodeclass"] :
    k => replace(substr(var.labels[k], 0, 63), "/[-._]+$/", "") if lookup(var.labels, k, "") != ""
  }

  server_labels = merge(
    {
      "fulfiller.sh/cluster"   = local.cluster
      "fulfiller.sh/node"      = var.node_name
      "fulfiller.sh/node-type" = var.node_type
    },
    local.nodepool == "" ? {} : { "karpenter.sh/nodepool" = local.nodepool },
    local.attribution,
  )
}

# The server type's architecture, which the selected image must have.
data "hcloud_server_type" "node" {
  count = local.image_selector == "" ? 0 : 1
  name  = local.server_type
}

# The newest image (a snapshot) whose labels match image_selector, for the server type's
# architecture.
data "hcloud_image" "selected" {
  count             = local.image_selector == "" ? 0 : 1
  with_selector     = local.image_selector
  with_architecture = data.hcloud_server_type.node[0].architecture
  most_recent       = true
}

resource "hcloud_server" "node" {
  name        = var.node_name
  server_type = local.server_type
  image       = local.image_selector == "" ? local.image : tostring(data.hcloud_image.selected[0].id)
  location    = var.zone
  user_data   = var.user_data
  ssh_keys    = local.ssh_keys
  labels      = local.server_labels

  firewall_ids       = local.firewall_ids
  placement_group_id = local.placement == "" ? null : tonumber(local.placement)

  public_net {
    ipv4_enabled = local.enable_ipv4
    ipv6_enabled = local.enable_ipv6
  }

  # The private network, attached before the server is started when it has no public
  # address (the provider creates it stopped, attaches, then powers it on).
  dynamic "network" {
    for_each = local.network_id == "" ? [] : [tonumber(local.network_id)]
    content {
      network_id = network.value
    }
  }

  lifecycle {
    # A server is one node for its whole life; a later apply of the same claim (a retry, or
    # the NodeClass's settings changed meanwhile) must not replace it or take it down.
    # Karpenter replaces drifted nodes with new claims instead.
    # - user_data: read once at first boot, and it holds the claim's join token; it is
    #   rendered once per claim, but a change would replace the server (ForceNew).
    # - image, ssh_keys: ForceNew, and only matter when the server is created.
    # - placement_group_id, public_net, network: changing them powers the server off or
    #   detaches its interfaces.
    # Labels and firewall_ids are still updated in place.
    ignore_changes = [user_data, image, ssh_keys, placement_group_id, public_net, network]

    precondition {
      condition     = length(local.cluster) <= 63 && can(regex("^[a-zA-Z0-9]([a-zA-Z0-9._-]*[a-zA-Z0-9])?$", local.cluster))
      error_message = "the cluster's name is required (labels[\"fulfiller.sh/cluster\"], which the fulfiller sets, or parameters.cluster), labelled on every server: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit."
    }
  }
}

# A subnet of a network with several subnets, attached right after the server is created
# (while it boots).
resource "hcloud_server_network" "node" {
  count     = local.subnet_id == "" ? 0 : 1
  server_id = hcloud_server.node.id
  subnet_id = local.subnet_id
}
