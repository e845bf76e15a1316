# A Hetzner Robot dedicated server as a node: the controller leases a server of the pool to
# the claim (its number is parameters.server_number) and this module activates it through
# `fulfiller robot`, the project's Robot webservice client and SSH layer. Destroying it
# releases the server: it is reinstalled as a standby in the background. See README.md.
#
# The provisioners run "$FULFILLER_BINARY" (the runner exports the fulfiller binary that
# started it, or its own). The credentials reach `fulfiller robot` through the runner's
# environment (the class's spec.credentials: HROBOT_USER, HROBOT_PASSWORD, HROBOT_SSH_KEY),
# never through this configuration. Values reach the shell through `environment`, never the
# command text.

locals {
  p = merge({
    activation_path     = "warm"
    host_key            = ""
    image               = "/root/.oldroot/nfs/images/Ubuntu-2404-noble-amd64-base.tar.gz"
    drives              = "/dev/sda,/dev/sdb"
    ssh_host            = ""
    ssh_port            = "22"
    server_ip           = ""
    lease_holder        = ""
    rescue_timeout      = "10m"
    install_timeout     = "30m"
    warm_timeout        = "2m"
    poll_interval       = "5s"
    release_image       = ""
    inventory_namespace = ""
  }, var.parameters)

  server_number = local.p.server_number
  # The user data's file in the run's folder, between the two provisioners.
  user_data_file = "${abspath(path.root)}/.robot-user-data"

  # What `fulfiller robot` needs besides the credentials, for activation and release alike.
  common = {
    ROBOT_SERVER          = local.server_number
    ROBOT_HOSTNAME        = var.node_name
    ROBOT_DRIVES          = local.p.drives
    ROBOT_SSH_HOST        = local.p.ssh_host
    ROBOT_SSH_PORT        = local.p.ssh_port
    ROBOT_NAMESPACE       = local.p.inventory_namespace
    ROBOT_HOLDER          = local.p.lease_holder
    ROBOT_RESCUE_TIMEOUT  = local.p.rescue_timeout
    ROBOT_INSTALL_TIMEOUT = local.p.install_timeout
    ROBOT_POLL_INTERVAL   = local.p.poll_interval
  }
}

resource "terraform_data" "server" {
  # Another server, another path or other user data is another node.
  triggers_replace = [local.server_number, local.p.activation_path, sha256(var.user_data)]

  # What the destroy-time provisioner needs: it may only refer to self.
  input = merge(local.common, {
    ROBOT_IMAGE = local.p.release_image != "" ? local.p.release_image : local.p.image
  })

  # The user data goes to a 0600 file through printf (a shell builtin, so it is on no
  # command line). tofu suppresses this provisioner's output: its environment is sensitive.
  provisioner "local-exec" {
    interpreter = ["/bin/sh", "-c"]
    command     = <<-EOT
      set -eu
      umask 077
      printf '%s' "$ROBOT_USER_DATA" > "$ROBOT_USER_DATA_FILE"
    EOT
    environment = {
      ROBOT_USER_DATA      = var.user_data
      ROBOT_USER_DATA_FILE = local.user_data_file
    }
  }

  # Activation: warm (join configuration over SSH, pinned to the recorded host key) or cold
  # (rescue, reset, installimage with the cloud-init seed, reboot). Its output, and the
  # "robot error <Reason>: ..." line of a failure, show in the run log.
  provisioner "local-exec" {
    interpreter = ["/bin/sh", "-c"]
    command     = <<-EOT
      set -eu
      : "$${FULFILLER_BINARY:?FULFILLER_BINARY must name the fulfiller binary}"
      trap 'rm -f "$ROBOT_USER_DATA_FILE"' EXIT
      "$FULFILLER_BINARY" robot activate --server "$ROBOT_SERVER" --path "$ROBOT_PATH" \
        --host-key "$ROBOT_HOST_KEY" --user-data-file "$ROBOT_USER_DATA_FILE" \
        --hostname "$ROBOT_HOSTNAME" --image "$ROBOT_IMAGE" --drives "$ROBOT_DRIVES" \
        --ssh-host "$ROBOT_SSH_HOST" --ssh-port "$ROBOT_SSH_PORT" \
        --inventory-namespace "$ROBOT_NAMESPACE" --holder "$ROBOT_HOLDER" \
        --rescue-timeout "$ROBOT_RESCUE_TIMEOUT" --install-timeout "$ROBOT_INSTALL_TIMEOUT" \
        --warm-timeout "$ROBOT_WARM_TIMEOUT" --poll-interval "$ROBOT_POLL_INTERVAL"
    EOT
    environment = merge(local.common, {
      ROBOT_PATH           = local.p.activation_path
      ROBOT_HOST_KEY       = local.p.host_key
      ROBOT_IMAGE          = local.p.image
      ROBOT_WARM_TIMEOUT   = local.p.warm_timeout
      ROBOT_USER_DATA_FILE = local.user_data_file
    })
  }

  # Release: rescue, reset, and a standby reinstall that runs on the server after this
  # returns; the new host key and the state "reinstalling" are recorded on the server's
  # inventory lease first. The pool keeper sees it reach standby.
  provisioner "local-exec" {
    when        = destroy
    interpreter = ["/bin/sh", "-c"]
    command     = <<-EOT
      set -eu
      : "$${FULFILLER_BINARY:?FULFILLER_BINARY must name the fulfiller binary}"
      "$FULFILLER_BINARY" robot release --server "$ROBOT_SERVER" \
        --hostname "robot-$ROBOT_SERVER" --image "$ROBOT_IMAGE" --drives "$ROBOT_DRIVES" \
        --ssh-host "$ROBOT_SSH_HOST" --ssh-port "$ROBOT_SSH_PORT" \
        --inventory-namespace "$ROBOT_NAMESPACE" --holder "$ROBOT_HOLDER" \
        --rescue-timeout "$ROBOT_RESCUE_TIMEOUT" --poll-interval "$ROBOT_POLL_INTERVAL"
    EOT
    environment = self.input
  }
}
