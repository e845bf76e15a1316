output "provider_id" {
  description = "The Node's spec.providerID: hcloud://<server-id>, what the hcloud cloud-controller-manager sets and what the machine reads from the metadata service at boot."
  value       = "hcloud://${hcloud_server.node.id}"
}

output "node_name" {
  description = "The name the machine registers its Node with."
  value       = var.node_name
}

output "addresses" {
  description = "The server's addresses: public IPv4, public IPv6, then private network addresses (each only when it has one)."
  value = concat(
    hcloud_server.node.ipv4_address == null || hcloud_server.node.ipv4_address == "" ? [] : [hcloud_server.node.ipv4_address],
    hcloud_server.node.ipv6_address == null || hcloud_server.node.ipv6_address == "" ? [] : [hcloud_server.node.ipv6_address],
    [for n in hcloud_server.node.network : n.ip],
    [for n in hcloud_server_network.node : n.ip],
  )
}
