output "provider_id" {
  description = "The Node's spec.providerID: kubevirt://<node_name>, known before apply (the NodeClass's providerIDTemplate kubevirt://{name})."
  value       = "kubevirt://${var.node_name}"
  depends_on  = [kubectl_manifest.virtual_machine]
}

output "node_name" {
  description = "The name the guest registers its Node with: the VirtualMachine's name."
  value       = var.node_name
  depends_on  = [kubectl_manifest.virtual_machine]
}

output "virtual_machine" {
  description = "The VirtualMachine on the infra cluster, <namespace>/<name>."
  value       = "${local.namespace}/${var.node_name}"
  depends_on  = [kubectl_manifest.virtual_machine]
}
