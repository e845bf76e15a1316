variable "node_name" {
  type = string
}

variable "zone" {
  type = string
}

resource "terraform_data" "machine" {
  input = "${var.node_name}.${var.zone}"
}

output "provider_id" {
  value = "sim://${var.zone}/${var.node_name}"
}
