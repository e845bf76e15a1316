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
{{- include "fulfiller.imageRef" (list .Values.image .Chart.AppVersion) }}
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

{{/* Karpenter's FEATURE_GATES value from settings.featureGates (sorted by name). */}}
{{- define "fulfiller.featureGates" -}}
{{- $gates := list }}
{{- range $name, $on := .Values.settings.featureGates }}
{{- $gates = append $gates (printf "%s=%t" $name $on) }}
{{- end }}
{{- join "," $gates }}
{{- end }}
