variable "node_name" {
  type = string
}

resource "terraform_data" "machine" {
  input       = var.node_name
  server_type = "cx22"
}

output "provider_id" {
  value = "sim://${var.node_name}"
}
