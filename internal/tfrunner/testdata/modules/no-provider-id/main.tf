variable "node_name" {
  type = string
}

resource "terraform_data" "machine" {
  input = var.node_name
}

output "addresses" {
  value = ["10.0.0.1"]
}
