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
#
# The provider waits for each action (the create, the start that follows it, a network attach,
# the delete) by polling it. Its default, every 500ms doubling (after 0.5, 1.5, 3.5, 7.5, 15.5,
# 31.5 s), spends five polls on the first 15 s of a create; from 5s doubling (after 5, 15, 35,
# 75 s) a create of up to 15 s takes two and one of up to 35 s three, against the project's
# 3600 requests an hour. parameters.poll_interval and poll_function change it.
provider "hcloud" {
  poll_interval = local.poll_interval
  poll_function = local.poll_function
}
