output "provider_id" {
  description = "The Node's spec.providerID: hrobot://<server_number>, known before apply (the controller chose the server)."
  value       = "hrobot://${local.server_number}"
  depends_on  = [terraform_data.server]
}

output "node_name" {
  description = "The name the server registers its Node with (the JoinConfiguration's nodeRegistration.name)."
  value       = var.node_name
  depends_on  = [terraform_data.server]
}

output "addresses" {
  description = "The server's main IP, when parameters.server_ip gives it (the pool's facts); empty otherwise."
  value       = local.p.server_ip != "" ? tolist([local.p.server_ip]) : tolist([])
  depends_on  = [terraform_data.server]
}
