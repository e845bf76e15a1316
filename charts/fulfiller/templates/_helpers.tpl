{{/* The chart's name, truncated to what a label value allows. */}}
{{- define "fulfiller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name for every object. */}}
{{- define "fulfiller.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fulfiller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "fulfiller.labels" -}}
helm.sh/chart: {{ include "fulfiller.chart" . }}
{{ include "fulfiller.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the controller's pods. */}}
{{- define "fulfiller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fulfiller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The controller's ServiceAccount. */}}
{{- define "fulfiller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fulfiller.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The runners' ServiceAccount. */}}
{{- define "fulfiller.runnerServiceAccountName" -}}
{{- if .Values.runner.serviceAccount.create }}
{{- default (printf "%s-runner" (include "fulfiller.fullname" .) | trunc 63 | trimSuffix "-") .Values.runner.serviceAccount.name }}
{{- else }}
{{- required "runner.serviceAccount.name is required when runner.serviceAccount.create is false" .Values.runner.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image reference from {repository, tag, digest}; the tag defaults to the chart's appVersion. */}}
{{- define "fulfiller.imageRef" -}}
{{- $img := index . 0 -}}
{{- $appVersion := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $appVersion $img.tag) -}}
{{- end -}}
{{- end }}

{{/* The controller's image. */}}
{{- define "fulfiller.image" -}}
{{- include "fulfiller.imageRef" (list .Values.controller.image .Chart.AppVersion) }}
{{- end }}

{{/* The runners' image: runner.image when it names a repository, else the controller's. */}}
{{- define "fulfiller.runnerImage" -}}
{{- if .Values.runner.image.repository }}
{{- include "fulfiller.imageRef" (list .Values.runner.image .Chart.AppVersion) }}
{{- else }}
{{- include "fulfiller.image" . }}
{{- end }}
{{- end }}

{{/* Name of the Lease the controller replicas elect a leader with. */}}
{{- define "fulfiller.leaderElectionName" -}}
{{- printf "%s-leader-election" (include "fulfiller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the Secret that holds the state encryption passphrase. */}}
{{- define "fulfiller.stateEncryptionSecretName" -}}
{{- if .Values.stateEncryption.existingSecret }}
{{- .Values.stateEncryption.existingSecret }}
{{- else }}
{{- printf "%s-state-encryption" (include "fulfiller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The namespace of the claims' states and locks. */}}
{{- define "fulfiller.stateNamespace" -}}
{{- default (printf "%s-states" .Release.Namespace | trunc 63 | trimSuffix "-") .Values.stateNamespace.name }}
{{- end }}

{{/*
Karpenter's FEATURE_GATES value from settings.featureGates, sorted: each gate's name with its
first letter upper-case (nodeRepair is Karpenter's NodeRepair). Names that start upper-case
are the deprecated ones, which fulfiller.migrateValues has copied.
*/}}
{{- define "fulfiller.featureGates" -}}
{{- $gates := list }}
{{- range $name, $on := .Values.settings.featureGates }}
{{- $first := substr 0 1 $name }}
{{- if eq $first (lower $first) }}
{{- $gates = append $gates (printf "%s%s=%t" (upper $first) (substr 1 -1 $name) $on) }}
{{- end }}
{{- end }}
{{- join "," $gates }}
{{- end }}

{{/*
Values renamed in chart 0.2.0 after Karpenter's chart: old name → new name. The old names are
read until chart 0.3.0, and NOTES.txt warns when one is set. A set old name wins over its new
name (whose default values.yaml always sets).
*/}}
{{- define "fulfiller.renamedValues" -}}
clusterName: settings.clusterName
image.repository: controller.image.repository
image.tag: controller.image.tag
image.digest: controller.image.digest
image.pullPolicy: imagePullPolicy
resources: controller.resources
securityContext: controller.securityContext
extraEnv: controller.env
metrics.port: controller.metrics.port
healthProbe.port: controller.healthProbe.port
metrics.service.enabled: service.enabled
metrics.service.port: service.port
metrics.service.annotations: service.annotations
metrics.serviceMonitor.enabled: serviceMonitor.enabled
metrics.serviceMonitor.additionalLabels: serviceMonitor.additionalLabels
metrics.serviceMonitor.endpointConfig: serviceMonitor.endpointConfig
metrics.serviceMonitor.interval: serviceMonitor.endpointConfig.interval
settings.featureGates.NodeRepair: settings.featureGates.nodeRepair
settings.featureGates.ReservedCapacity: settings.featureGates.reservedCapacity
settings.featureGates.SpotToSpotConsolidation: settings.featureGates.spotToSpotConsolidation
settings.featureGates.NodeOverlay: settings.featureGates.nodeOverlay
settings.featureGates.StaticCapacity: settings.featureGates.staticCapacity
settings.featureGates.CapacityBuffer: settings.featureGates.capacityBuffer
settings.featureGates.TerminateFirstDrift: settings.featureGates.terminateFirstDrift
settings.featureGates.TerminateFirstRepair: settings.featureGates.terminateFirstRepair
settings.featureGates.PodDeletionCostManagement: settings.featureGates.podDeletionCostManagement
{{- end }}

{{/*
"true" when a dotted path of .Values leads through maps to a key that is present and not null.
*/}}
{{- define "fulfiller.valueSet" -}}
{{- $at := index . 0 -}}
{{- $found := true -}}
{{- range $key := splitList "." (index . 1) -}}
{{- if and $found (kindIs "map" $at) (hasKey $at $key) (not (kindIs "invalid" (get $at $key))) -}}
{{- $at = get $at $key -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if $found }}true{{ end -}}
{{- end }}

{{/*
Copies every set old name of fulfiller.renamedValues to its new name in .Values (a map merged
over the new name's default, as helm merges values). Each template that reads a renamed value
calls it first (helm renders templates in no order it promises); copying again changes
nothing.
*/}}
{{- define "fulfiller.migrateValues" -}}
{{- $values := .Values -}}
{{- range $old, $new := include "fulfiller.renamedValues" . | fromYaml -}}
{{- if include "fulfiller.valueSet" (list $values $old) -}}
{{- $value := $values -}}
{{- range $key := splitList "." $old -}}
{{- $value = get $value $key -}}
{{- end -}}
{{- $at := $values -}}
{{- $keys := splitList "." $new -}}
{{- range $key := initial $keys -}}
{{- if not (kindIs "map" (get $at $key)) -}}
{{- $_ := set $at $key dict -}}
{{- end -}}
{{- $at = get $at $key -}}
{{- end -}}
{{- $current := get $at (last $keys) -}}
{{- if and (kindIs "map" $value) (kindIs "map" $current) -}}
{{- /* As helm merges a map value with its default: key by key, the value winning. */ -}}
{{- $value = mergeOverwrite (deepCopy $current) $value -}}
{{- end -}}
{{- $_ := set $at (last $keys) $value -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The old names of fulfiller.renamedValues that are set, one "old: use new" a line. */}}
{{- define "fulfiller.deprecatedValuesSet" -}}
{{- $values := .Values -}}
{{- range $old, $new := include "fulfiller.renamedValues" . | fromYaml -}}
{{- if include "fulfiller.valueSet" (list $values $old) }}
  - {{ $old }}: use {{ $new }}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
tofu's CLI configuration (tofu.cliConfig): the ConfigMap's name and where it is mounted, in the
controller and in every runner pod.
*/}}
{{- define "fulfiller.tofuCLIConfigName" -}}
{{- printf "%s-tofu-cli-config" (include "fulfiller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "fulfiller.tofuCLIConfigFile" -}}
/etc/fulfiller/cli-config/tofurc
{{- end }}

{{/*
The runner pods' tofu environment, volumes and mounts: runner.env, runner.extraVolumes and
runner.extraVolumeMounts, with tofu.cliConfig's file when it is set.
*/}}
{{- define "fulfiller.runnerEnv" -}}
{{- $env := .Values.runner.env }}
{{- if .Values.tofu.cliConfig }}
{{- range .Values.runner.env }}
{{- if eq .name "TF_CLI_CONFIG_FILE" }}
{{- fail "runner.env sets TF_CLI_CONFIG_FILE and tofu.cliConfig is set: use one of them" }}
{{- end }}
{{- end }}
{{- $env = append $env (dict "name" "TF_CLI_CONFIG_FILE" "value" (include "fulfiller.tofuCLIConfigFile" .)) }}
{{- end }}
{{- toJson $env }}
{{- end }}
{{- define "fulfiller.runnerVolumes" -}}
{{- $volumes := .Values.runner.extraVolumes }}
{{- if .Values.tofu.cliConfig }}
{{- $volumes = append $volumes (dict "name" "tofu-cli-config" "configMap" (dict "name" (include "fulfiller.tofuCLIConfigName" .))) }}
{{- end }}
{{- toJson $volumes }}
{{- end }}
{{- define "fulfiller.runnerVolumeMounts" -}}
{{- $mounts := .Values.runner.extraVolumeMounts }}
{{- if .Values.tofu.cliConfig }}
{{- $mounts = append $mounts (dict "name" "tofu-cli-config" "mountPath" (dir (include "fulfiller.tofuCLIConfigFile" .)) "readOnly" true) }}
{{- end }}
{{- toJson $mounts }}
{{- end }}
