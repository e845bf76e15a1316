terraform {
  required_version = ">= 1.12.0"

  # Pin every provider the module uses to one version: each claim's later runs (its destroy
  # included) must use the provider its apply used. The runner installs providers from the
  # image's mirror only, so the version must be one the mirror holds. For example:
  #
  # required_providers {
  #   hcloud = {
  #     source  = "hetznercloud/hcloud"
  #     version = "= 1.52.0"
  #   }
  # }
  #
  # No backend or cloud block: the fulfiller configures each claim's state (spec.backend).
}
