output "provider_id" {
  description = "The Node's spec.providerID: the ID the machine's kubelet registers with (the node type's providerIDTemplate when it has one)."
  value       = "template://${var.node_name}"
  depends_on  = [terraform_data.machine]
}

output "node_name" {
  description = "The name the machine registers its Node with."
  value       = var.node_name
}

output "addresses" {
  description = "The machine's addresses (a list of strings)."
  value       = []
}
