output "provider_id" {
  description = "The Node's spec.providerID: sim://<node_name>, known before apply."
  value       = "sim://${var.node_name}"
  depends_on  = [terraform_data.machine]
}

output "node_name" {
  description = "The name the machine registers its Node with."
  value       = var.node_name
  depends_on  = [terraform_data.machine]
}

output "addresses" {
  description = "The machine's addresses (all simulated machines live on loopback)."
  value       = tolist([local.address])
  depends_on  = [terraform_data.machine]
}
