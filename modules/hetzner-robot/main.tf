# A Hetzner Robot dedicated server as a node: the controller leases a server of the pool to
# the claim (its number is parameters.server_number) and this module activates it through
# `fulfiller robot`, the project's Robot webservice client and SSH layer. Destroying it
# releases the server: it is reinstalled as a standby in the background. See README.md.
#
# The provisioners run `fulfiller robot` with no shell: the runner puts the fulfiller binary
# first on tofu's PATH as `fulfiller`, and the command reads every flag it is not given from
# its ROBOT_* variable, which each provisioner's `environment` sets; the image has no shell.
# The credentials reach `fulfiller robot` through the runner's environment (the class's
# spec.credentials: HROBOT_USER, HROBOT_PASSWORD, HROBOT_SSH_KEY), never through this
# configuration; no value is on a command line.

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

# Release, a resource of its own that the server's depends on: tofu skips the destroy-time
# provisioners of a tainted resource, and the server's resource is tainted when its
# activation fails or is interrupted (a failed installimage, a rescue system that never
# came up, SIGINT when the claim is deleted mid-apply). Such a server is half installed with
# the claim's user data, or in the rescue system; it must be released all the same. This
# resource has no creation-time provisioner, so it is never tainted; it is created before
# the activation starts and destroyed after the server's resource. A server a warm
# activation found not in standby (recorded unverified) is released without a reinstall.
resource "terraform_data" "release" {
  # Replaced with the server's resource, so a replaced node is released first.
  triggers_replace = [local.server_number, local.p.activation_path, sha256(var.user_data)]

  # What the destroy-time provisioner needs: it may only refer to self.
  input = merge(local.common, {
    ROBOT_IMAGE = local.p.release_image != "" ? local.p.release_image : local.p.image
  })

  # Release: rescue, reset, and a standby reinstall that runs on the server after this
  # returns; the new host key and the state "reinstalling" are recorded on the server's
  # inventory lease first. The pool keeper sees it reach standby.
  provisioner "local-exec" {
    when        = destroy
    interpreter = ["fulfiller", "robot"]
    command     = "release"
    environment = self.input
  }
}

resource "terraform_data" "server" {
  # Another server, another path or other user data is another node.
  triggers_replace = [local.server_number, local.p.activation_path, sha256(var.user_data)]
  depends_on       = [terraform_data.release]

  # What the destroy-time provisioner needs: it may only refer to self. ROBOT_RELEASE_APART
  # says that terraform_data.release releases the server.
  input = merge(local.common, {
    ROBOT_IMAGE         = local.p.release_image != "" ? local.p.release_image : local.p.image
    ROBOT_RELEASE_APART = "true"
  })

  # The user data goes to a 0600 file from the environment, so it is on no command line.
  # tofu suppresses this provisioner's output: its environment is sensitive.
  provisioner "local-exec" {
    interpreter = ["fulfiller", "robot"]
    command     = "user-data"
    environment = {
      ROBOT_USER_DATA      = var.user_data
      ROBOT_USER_DATA_FILE = local.user_data_file
    }
  }

  # Activation: warm (join configuration over SSH, pinned to the recorded host key) or cold
  # (rescue, reset, installimage with the cloud-init seed, reboot). Its output, and the
  # "robot error <Reason>: ..." line of a failure, show in the run log.
  provisioner "local-exec" {
    interpreter = ["fulfiller", "robot"]
    command     = "activate"
    environment = merge(local.common, {
      ROBOT_PATH           = local.p.activation_path
      ROBOT_HOST_KEY       = local.p.host_key
      ROBOT_IMAGE          = local.p.image
      ROBOT_WARM_TIMEOUT   = local.p.warm_timeout
      ROBOT_USER_DATA_FILE = local.user_data_file
      # The user data's file is removed when the activation ends, however it ends.
      ROBOT_REMOVE_USER_DATA_FILE = "true"
    })
  }

  # The release of a node activated by an earlier version of this module, whose state has
  # no terraform_data.release (and no ROBOT_RELEASE_APART in this resource's input): as that
  # version released it. Every later state's node is released by terraform_data.release:
  # with ROBOT_RELEASE_APART set, this release does nothing.
  provisioner "local-exec" {
    when        = destroy
    interpreter = ["fulfiller", "robot"]
    command     = "release"
    environment = self.input
  }
}
