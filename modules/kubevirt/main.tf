# A KubeVirt node type: one VirtualMachine per claim on an infra cluster, booted with the
# claim's cloud-init user data from a Secret. See README.md.

locals {
  p = merge({
    kubeconfig_path          = ""
    cluster_name             = ""
    cpu_cores                = "2"
    cpu_sockets              = "1"
    cpu_threads              = "1"
    cpu_model                = ""
    dedicated_cpu            = "false"
    memory                   = "4Gi"
    storage_class            = ""
    disk_size                = "20Gi"
    disk_access_mode         = ""
    pod_network              = "true"
    multus_networks          = ""
    gpu_device_name          = ""
    gpu_count                = "0"
    host_devices             = ""
    node_selector            = "{}"
    tolerations              = "[]"
    affinity                 = "{}"
    eviction_strategy        = ""
    termination_grace_period = "30"
  }, var.parameters)

  namespace   = local.p.namespace
  secret_name = "${var.node_name}-userdata"
  disk_name   = "${var.node_name}-root"

  # The claim, its cluster and its NodePool, on everything the module creates: what an
  # inventory of this cluster's VMs selects by.
  labels = merge(var.labels, {
    "karpenter.sh/nodeclaim"           = var.node_name
    "node.kubernetes.io/instance-type" = var.node_type
    }, local.p.cluster_name == "" ? {} : {
    "fulfiller.sh/cluster" = local.p.cluster_name
  })

  # A DataVolume disk when a storage class is given, else a containerDisk (ephemeral).
  data_volume = local.p.storage_class != ""
  root_volume = merge(
    { name = "rootdisk" },
    local.data_volume ? { dataVolume = { name = local.disk_name } } : {},
    local.data_volume ? {} : { containerDisk = { image = local.p.image } },
  )
  data_volume_templates = local.data_volume ? [{
    metadata = { name = local.disk_name, labels = local.labels }
    spec = {
      source = { registry = { url = "docker://${local.p.image}" } }
      storage = merge({
        storageClassName = local.p.storage_class
        resources        = { requests = { storage = local.p.disk_size } }
      }, local.p.disk_access_mode == "" ? {} : { accessModes = [local.p.disk_access_mode] })
    }
  }] : []

  multus = [for n in compact(split(",", replace(local.p.multus_networks, " ", ""))) : {
    name        = "net-${replace(replace(n, "/", "-"), ".", "-")}"
    networkName = n
  }]
  networks = concat(
    local.p.pod_network == "true" ? [{ name = "default", pod = {} }] : [],
    [for m in local.multus : { name = m.name, multus = { networkName = m.networkName } }],
  )
  interfaces = concat(
    local.p.pod_network == "true" ? [{ name = "default", masquerade = {} }] : [],
    [for m in local.multus : { name = m.name, bridge = {} }],
  )

  gpus         = [for i in range(tonumber(local.p.gpu_count)) : { name = "gpu${i}", deviceName = local.p.gpu_device_name }]
  host_devices = [for i, d in compact([for d in split(",", local.p.host_devices) : trimspace(d)]) : { name = "hostdev${i}", deviceName = d }]

  cpu = merge(
    {
      cores   = tonumber(local.p.cpu_cores)
      sockets = tonumber(local.p.cpu_sockets)
      threads = tonumber(local.p.cpu_threads)
    },
    local.p.cpu_model == "" ? {} : { model = local.p.cpu_model },
    local.p.dedicated_cpu == "true" ? { dedicatedCpuPlacement = true } : {},
  )

  placement = merge(
    length(jsondecode(local.p.node_selector)) == 0 ? {} : { nodeSelector = jsondecode(local.p.node_selector) },
    length(jsondecode(local.p.tolerations)) == 0 ? {} : { tolerations = jsondecode(local.p.tolerations) },
    length(jsondecode(local.p.affinity)) == 0 ? {} : { affinity = jsondecode(local.p.affinity) },
    local.p.eviction_strategy == "" ? {} : { evictionStrategy = local.p.eviction_strategy },
  )

  virtual_machine = {
    apiVersion = "kubevirt.io/v1"
    kind       = "VirtualMachine"
    metadata = {
      name      = var.node_name
      namespace = local.namespace
      labels    = local.labels
    }
    spec = merge({
      runStrategy = "Always"
      template = {
        metadata = { labels = merge(local.labels, { "kubevirt.io/vm" = var.node_name }) }
        spec = merge({
          domain = {
            cpu    = local.cpu
            memory = { guest = local.p.memory }
            resources = {
              requests = { memory = local.p.memory }
            }
            devices = merge({
              disks = [
                { name = "rootdisk", disk = { bus = "virtio" } },
                { name = "cloudinit", disk = { bus = "virtio" } },
              ]
              interfaces = local.interfaces
              }, length(local.gpus) == 0 ? {} : { gpus = local.gpus },
            length(local.host_devices) == 0 ? {} : { hostDevices = local.host_devices })
          }
          networks                      = local.networks
          terminationGracePeriodSeconds = tonumber(local.p.termination_grace_period)
          volumes = [
            local.root_volume,
            { name = "cloudinit", cloudInitNoCloud = { secretRef = { name = local.secret_name } } },
          ]
        }, local.placement)
      }
    }, local.data_volume ? { dataVolumeTemplates = local.data_volume_templates } : {})
  }
}

# The claim's user data, byte for byte: cloud-init's NoCloud source reads the key userdata.
# User data the fulfiller gzipped and base64-encoded (over a node type's userDataLimit) is
# stored as the gzip bytes, which cloud-init decompresses.
resource "kubectl_manifest" "userdata" {
  yaml_body = yamlencode({
    apiVersion = "v1"
    kind       = "Secret"
    type       = "Opaque"
    metadata = {
      name      = local.secret_name
      namespace = local.namespace
      labels    = local.labels
    }
    data = {
      userdata = startswith(var.user_data, "H4sI") ? trimspace(var.user_data) : base64encode(var.user_data)
    }
  })
  sensitive_fields = ["data"]
  # A machine's user data is rendered once: a change is a new machine.
  force_new = true
}

resource "kubectl_manifest" "virtual_machine" {
  yaml_body = yamlencode(local.virtual_machine)
  force_new = true
  # Destroy returns once the VM and its VMI are gone (the guest powered off), and its
  # DataVolumes with them (foreground deletion).
  wait = true

  depends_on = [kubectl_manifest.userdata]
}
