# A simulated node type: terraform_data stands in for the machine, local-exec for the
# provider's API. parameters tune it for tests:
#   sleep_seconds  how long creating the "machine" takes
#   fail_with      text the "API" prints before failing (an error code and message)
#   record_dir     where to record the user data and the environment it saw
variable "node_name" {
  type = string
}

variable "user_data" {
  type      = string
  sensitive = true
}

variable "labels" {
  type    = map(string)
  default = {}
}

variable "parameters" {
  type    = map(string)
  default = {}
}

locals {
  sleep_seconds = lookup(var.parameters, "sleep_seconds", "0")
  fail_with     = lookup(var.parameters, "fail_with", "")
  record_dir    = lookup(var.parameters, "record_dir", "")
}

resource "terraform_data" "machine" {
  input = {
    node_name  = var.node_name
    record_dir = local.record_dir
  }

  provisioner "local-exec" {
    command = "sleep \"$SLEEP\"; if [ -n \"$FAIL_WITH\" ]; then echo \"$FAIL_WITH\"; exit 1; fi"
    environment = {
      SLEEP     = local.sleep_seconds
      FAIL_WITH = local.fail_with
    }
  }

  provisioner "local-exec" {
    command = "if [ -n \"$RECORD\" ]; then printf '%s' \"$USER_DATA\" > \"$RECORD/user_data\"; env > \"$RECORD/env\"; fi"
    environment = {
      RECORD    = local.record_dir
      USER_DATA = var.user_data
    }
  }

  provisioner "local-exec" {
    when    = destroy
    command = "if [ -n \"$RECORD\" ]; then touch \"$RECORD/destroyed\"; fi"
    environment = {
      RECORD = self.input.record_dir
    }
  }
}

output "provider_id" {
  value = "sim://${var.node_name}/${terraform_data.machine.id}"
}

output "node_name" {
  value = var.node_name
}

output "addresses" {
  value = ["10.0.0.1", "fd00::1"]
}

output "labels" {
  value = var.labels
}
