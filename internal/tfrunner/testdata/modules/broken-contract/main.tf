# Breaks the module contract in every way the static check knows (contract_test.go).
terraform {
  backend "s3" {}

  required_providers {
    null = {
      source = "hashicorp/null"
    }
  }
}

variable "node_name" {
  type = number
}

variable "user_data" {
  type = string
}

variable "image" {
  type = string
}

resource "null_resource" "machine" {}

resource "random_id" "suffix" {
  byte_length = 4
}

output "addresses" {
  value = []
}
