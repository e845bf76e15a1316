# The simulated node type: a "cloud" whose servers are simulated machines, background
# processes of `fulfiller-dev sim` that boot, read their cloud-init user data, join with the
# bootstrap token in it and run a simulated kubelet. See README.md.
#
# The provisioners run the simulated machine's binary: fulfiller-sim when it lies beside
# "$FULFILLER_BINARY", else "$FULFILLER_BINARY sim" (the runner exports the fulfiller binary
# that started it, or its own: it must be the development binary, fulfiller-dev, which has
# `sim`). Values reach the shell through `environment`, never through the command text, so
# that the command tofu prints and puts in error messages carries neither the user data nor
# the simulated error codes.

locals {
  parameters = merge({
    cpu                 = "2"
    memory              = "4Gi"
    ephemeral_storage   = "20Gi"
    pods                = "110"
    gpu_resource        = ""
    gpu_count           = "0"
    boot_delay          = "0s"
    apply_delay         = "0"
    apply_error         = ""
    never_join          = "false"
    cni_delay           = "0s"
    cni_never           = "false"
    gpu_delay           = "0s"
    gpu_never           = "false"
    image               = "stock"
    os                  = "ubuntu-24.04"
    arch                = "amd64"
    package_delay       = "0s"
    package_fault       = ""
    package_fault_times = "0"
  }, var.parameters)

  state_dir = "${trimsuffix(var.parameters["sim_dir"], "/")}/${var.node_name}"
  address   = "127.0.0.1"

  # What the cloud API answers when creation fails, with the error codes of the Hetzner Cloud
  # API that the fulfiller classifies.
  apply_errors = {
    ""       = ""
    capacity = "error: resource_unavailable: server type ${var.node_type} is not available in ${var.zone}"
    quota    = "error: server_limit_exceeded: the project's server limit is reached (resource_limit_exceeded), cannot create a ${var.node_type} in ${var.zone}"
    invalid  = "error: invalid_input: invalid input in field 'server_type': ${var.node_type} cannot be created in ${var.zone}"
    # What terraform-provider-hcloud prints for a wrong or revoked API token.
    credentials = "error: unable to authenticate (unauthorized)"
    # What it prints when the project's request budget is used up; retrying later helps.
    transient = "error: limit of 3600 requests per hour reached (rate_limit_exceeded)"
  }

  # A change to any of these is a new server.
  machine = {
    node_name           = var.node_name
    node_type           = var.node_type
    zone                = var.zone
    cpu                 = local.parameters.cpu
    memory              = local.parameters.memory
    ephemeral_storage   = local.parameters.ephemeral_storage
    pods                = local.parameters.pods
    gpu_resource        = local.parameters.gpu_resource
    gpu_count           = local.parameters.gpu_count
    never_join          = local.parameters.never_join
    cni_delay           = local.parameters.cni_delay
    cni_never           = local.parameters.cni_never
    gpu_delay           = local.parameters.gpu_delay
    gpu_never           = local.parameters.gpu_never
    image               = local.parameters.image
    os                  = local.parameters.os
    arch                = local.parameters.arch
    package_delay       = local.parameters.package_delay
    package_fault       = local.parameters.package_fault
    package_fault_times = local.parameters.package_fault_times
  }
}

# Power-off and deletion, a resource of its own that the machine depends on: a cloud deletes
# a server whose creation failed or was interrupted, but tofu skips the destroy-time
# provisioners of a tainted resource, and the machine's resource is tainted when its power-on
# provisioner fails or is interrupted (SIGINT when its claim is deleted mid-apply). This one
# has no creation-time provisioner, so it is never tainted, and is destroyed after the
# machine: `sim stop` of a machine that never started, or is already gone, does nothing.
resource "terraform_data" "deletion" {
  # Replaced with the machine, so a replaced machine is stopped first.
  triggers_replace = [local.machine, sha256(var.user_data)]

  # What the destroy-time provisioner needs: it may only refer to self.
  input = {
    state_dir = local.state_dir
  }

  # The machine's Node stays, as a deleted server's does.
  provisioner "local-exec" {
    when        = destroy
    interpreter = ["/bin/sh", "-c"]
    command     = <<-EOT
      set -eu
      : "$${FULFILLER_BINARY:?FULFILLER_BINARY must name the fulfiller-dev binary}"
      if [ -x "$${FULFILLER_BINARY%/*}/fulfiller-sim" ]; then set -- "$${FULFILLER_BINARY%/*}/fulfiller-sim"; else set -- "$FULFILLER_BINARY" sim; fi
      : "$${SIM_STATE_DIR:?}"
      echo "deleting simulated server in $SIM_STATE_DIR"
      "$@" stop --state-dir "$SIM_STATE_DIR"
      rm -rf -- "$SIM_STATE_DIR"
    EOT
    environment = {
      SIM_STATE_DIR = self.input.state_dir
    }
  }
}

resource "terraform_data" "machine" {
  # Changing the user data replaces the server, as hcloud_server.user_data does.
  triggers_replace = [local.machine, sha256(var.user_data)]
  depends_on       = [terraform_data.deletion]

  # The cloud API call: takes apply_delay seconds and fails as apply_error says.
  provisioner "local-exec" {
    interpreter = ["/bin/sh", "-c"]
    command     = <<-EOT
      set -eu
      echo "creating simulated server $SIM_NODE_NAME ($SIM_NODE_TYPE in $SIM_ZONE)"
      [ "$SIM_APPLY_DELAY" = 0 ] || sleep "$SIM_APPLY_DELAY"
      if [ -n "$SIM_APPLY_ERROR" ]; then
        echo "$SIM_APPLY_ERROR" >&2
        exit 1
      fi
    EOT
    environment = {
      SIM_NODE_NAME   = var.node_name
      SIM_NODE_TYPE   = var.node_type
      SIM_ZONE        = var.zone
      SIM_APPLY_DELAY = local.parameters.apply_delay
      SIM_APPLY_ERROR = local.apply_errors[local.parameters.apply_error]
    }
  }

  # Power-on: the user data goes to a 0600 file through printf (a shell builtin, so it is on
  # no command line), then the machine starts in the background. `sim start --in-place` is
  # the machine itself, started in the background: it says on stdout that it runs (or why
  # not), then points its output at its log, which ends the command substitution. So a
  # machine costs one process start, as a server costs its cloud one API call, not two. tofu
  # suppresses this provisioner's output because its environment holds a sensitive value.
  provisioner "local-exec" {
    interpreter = ["/bin/sh", "-c"]
    command     = <<-EOT
      set -eu
      : "$${FULFILLER_BINARY:?FULFILLER_BINARY must name the fulfiller-dev binary}"
      if [ -x "$${FULFILLER_BINARY%/*}/fulfiller-sim" ]; then set -- "$${FULFILLER_BINARY%/*}/fulfiller-sim"; else set -- "$FULFILLER_BINARY" sim; fi
      umask 077
      mkdir -p "$SIM_STATE_DIR"
      printf '%s' "$SIM_LABELS" > "$SIM_STATE_DIR/labels.json"
      printf '%s' "$SIM_USER_DATA" > "$SIM_STATE_DIR/user-data"
      unset SIM_USER_DATA
      started=$("$@" start --in-place \
        --state-dir "$SIM_STATE_DIR" --name "$SIM_NODE_NAME" --user-data "$SIM_STATE_DIR/user-data" \
        --cpu "$SIM_CPU" --memory "$SIM_MEMORY" --ephemeral-storage "$SIM_EPHEMERAL_STORAGE" --pods "$SIM_PODS" \
        --gpu-resource "$SIM_GPU_RESOURCE" --gpu-count "$SIM_GPU_COUNT" \
        --boot-delay "$SIM_BOOT_DELAY" --never-join="$SIM_NEVER_JOIN" --address "$SIM_ADDRESS" \
        --cni-delay "$SIM_CNI_DELAY" --cni-never="$SIM_CNI_NEVER" --gpu-delay "$SIM_GPU_DELAY" --gpu-never="$SIM_GPU_NEVER" \
        --image "$SIM_IMAGE" --os "$SIM_OS" --arch "$SIM_ARCH" --package-delay "$SIM_PACKAGE_DELAY" \
        --package-fault "$SIM_PACKAGE_FAULT" --package-fault-times "$SIM_PACKAGE_FAULT_TIMES" \
        </dev/null 2>&1 &)
      case "$started" in
        "machine $SIM_NODE_NAME running "*) printf '%s\n' "$started" ;;
        *) printf '%s\n' "$${started:-the machine exited without saying why}" >&2; exit 1 ;;
      esac
    EOT
    environment = {
      SIM_USER_DATA           = var.user_data
      SIM_LABELS              = jsonencode(var.labels)
      SIM_STATE_DIR           = local.state_dir
      SIM_NODE_NAME           = var.node_name
      SIM_CPU                 = local.parameters.cpu
      SIM_MEMORY              = local.parameters.memory
      SIM_EPHEMERAL_STORAGE   = local.parameters.ephemeral_storage
      SIM_PODS                = local.parameters.pods
      SIM_GPU_RESOURCE        = local.parameters.gpu_resource
      SIM_GPU_COUNT           = local.parameters.gpu_count
      SIM_BOOT_DELAY          = local.parameters.boot_delay
      SIM_NEVER_JOIN          = local.parameters.never_join
      SIM_ADDRESS             = local.address
      SIM_CNI_DELAY           = local.parameters.cni_delay
      SIM_CNI_NEVER           = local.parameters.cni_never
      SIM_GPU_DELAY           = local.parameters.gpu_delay
      SIM_GPU_NEVER           = local.parameters.gpu_never
      SIM_IMAGE               = local.parameters.image
      SIM_OS                  = local.parameters.os
      SIM_ARCH                = local.parameters.arch
      SIM_PACKAGE_DELAY       = local.parameters.package_delay
      SIM_PACKAGE_FAULT       = local.parameters.package_fault
      SIM_PACKAGE_FAULT_TIMES = local.parameters.package_fault_times
    }
  }
}
