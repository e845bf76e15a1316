# A module whose provider_id and addresses are sensitive: the apply's -json stream leaves
# their values out, so the runner reads them with `tofu output -json`.
variable "node_name" {
  type = string
}

resource "terraform_data" "machine" {
  input = var.node_name
}

output "provider_id" {
  value     = "sim://${var.node_name}"
  sensitive = true
}

output "addresses" {
  value     = ["10.0.0.9"]
  sensitive = true
}

output "zone" {
  value = "sim-1"
}
