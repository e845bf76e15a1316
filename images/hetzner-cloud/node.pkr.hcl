# A Hetzner Cloud snapshot with the node software of one Kubernetes version: a server of a
# stock image runs the same install script the user data runs at boot on a stock image
# (internal/bootstrap/scripts/install.sh), then Packer snapshots it. See README.md.
#
#   HCLOUD_TOKEN=... packer init images/hetzner-cloud
#   HCLOUD_TOKEN=... packer build -var kubernetes_version=v1.36.3 images/hetzner-cloud
#
# A class selects the newest snapshot of its version by label (modules/hetzner-cloud's
# image_selector) and takes bootstrap.install: none.

packer {
  required_plugins {
    hcloud = {
      source  = "github.com/hetznercloud/hcloud"
      version = ">= 1.6.0"
    }
  }
}

variable "kubernetes_version" {
  type        = string
  description = "kubelet, kubeadm and kubectl of this version (vX.Y.Z), from pkgs.k8s.io."
  validation {
    condition     = can(regex("^v[0-9]+\\.[0-9]+\\.[0-9]+$", var.kubernetes_version))
    error_message = "The kubernetes_version must look like v1.36.3."
  }
}

variable "containerd_version" {
  type        = string
  default     = ""
  description = "containerd release (X.Y.Z); empty for the install script's default."
}

variable "runc_version" {
  type        = string
  default     = ""
  description = "runc release (X.Y.Z); empty for the install script's default."
}

variable "image" {
  type        = string
  default     = "ubuntu-24.04"
  description = "The stock image to start from: ubuntu-24.04, ubuntu-22.04 or debian-12."
}

variable "server_type" {
  type        = string
  default     = "cx23"
  description = "The server type of the build; its architecture is the snapshot's (cax11 for arm64)."
}

variable "location" {
  type    = string
  default = "nbg1"
}

locals {
  # Hetzner label values: letters, digits, '-', '_', '.'; a version is one.
  labels = {
    "fulfiller.sh/image"              = "node"
    "fulfiller.sh/kubernetes-version" = var.kubernetes_version
    "fulfiller.sh/os"                 = var.image
  }
}

source "hcloud" "node" {
  image           = var.image
  location        = var.location
  server_type     = var.server_type
  ssh_username    = "root"
  snapshot_name   = "fulfiller-node-${var.kubernetes_version}-${var.image}-${formatdate("YYYYMMDDhhmm", timestamp())}"
  snapshot_labels = local.labels
}

build {
  sources = ["source.hcloud.node"]

  provisioner "shell" {
    inline = ["mkdir -p /usr/local/lib/fulfiller"]
  }

  provisioner "file" {
    source      = "${path.root}/../../internal/bootstrap/scripts/install.sh"
    destination = "/usr/local/lib/fulfiller/install.sh"
  }

  provisioner "shell" {
    inline_shebang = "/bin/sh -eu"
    environment_vars = [
      "KUBERNETES_VERSION=${var.kubernetes_version}",
      "CONTAINERD_VERSION=${var.containerd_version}",
      "RUNC_VERSION=${var.runc_version}",
    ]
    inline = [
      "sh /usr/local/lib/fulfiller/install.sh",
      # What a machine of this image must not carry over: cloud-init's record of this boot
      # (so that a server of the snapshot runs its own user data) and the install's state.
      "cloud-init clean --logs --machine-id",
      "rm -rf /var/lib/fulfiller",
    ]
  }
}
