terraform {
  required_version = ">= 1.12.0"

  required_providers {
    hcloud = {
      source  = "hetznercloud/hcloud"
      version = "= 1.58.0"
    }
  }
}

# The token comes from HCLOUD_TOKEN (the NodeClass's credentials Secret), the API endpoint from
# HCLOUD_ENDPOINT when set (the default is https://api.hetzner.cloud/v1).
provider "hcloud" {}
