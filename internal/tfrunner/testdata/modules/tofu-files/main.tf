# Overridden by main.tofu when read by OpenTofu.
variable "only_in_tf" {
  type = string
}
