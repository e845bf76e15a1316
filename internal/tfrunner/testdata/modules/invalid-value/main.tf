variable "node_name" {
  type = string

  validation {
    condition     = length(var.node_name) <= 8
    error_message = "The node name must have at most 8 characters."
  }
}

resource "terraform_data" "machine" {
  input = var.node_name
}

output "provider_id" {
  value = "sim://${var.node_name}"
}
