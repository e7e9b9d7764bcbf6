{{/* Chart name. */}}
{{- define "karpenter-rs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it contains the chart name (`helm install karpenter-rs ...`). */}}
{{- define "karpenter-rs.fullname" -}}
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

{{- define "karpenter-rs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "karpenter-rs.labels" -}}
helm.sh/chart: {{ include "karpenter-rs.chart" . }}
{{ include "karpenter-rs.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Pod selector. */}}
{{- define "karpenter-rs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter-rs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* metadata.annotations of every resource, when any. */}}
{{- define "karpenter-rs.annotations" -}}
{{- with .Values.additionalAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "karpenter-rs.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter-rs.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Secret of the self-managed webhook certificates. */}}
{{- define "karpenter-rs.certSecret" -}}
{{- default (printf "%s-cert" (include "karpenter-rs.fullname" .)) .Values.webhook.certSecret }}
{{- end }}

{{/* The webhook configurations' names are fixed: they are what `karpenter-rs webhook-config` prints (src/webhook/registration.rs). */}}
{{- define "karpenter-rs.mutatingWebhookConfiguration" -}}karpenter-rs-defaulting{{- end }}
{{- define "karpenter-rs.validatingWebhookConfiguration" -}}karpenter-rs-validation{{- end }}

{{/* The leader Lease's name (src/main.rs). */}}
{{- define "karpenter-rs.leaderLease" -}}karpenter-rs-leader-election{{- end }}

{{- define "karpenter-rs.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}
