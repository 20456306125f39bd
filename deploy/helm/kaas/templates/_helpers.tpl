{{/* The name of every object: <release>-kaas, or the release name when it already says kaas. */}}
{{- define "kaas.fullname" -}}
{{- if contains "kaas" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kaas" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kaas.labels" -}}
app.kubernetes.io/name: kaas
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kaas.selector" -}}
app.kubernetes.io/name: kaas
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kaas.claim" -}}
{{- if .Values.storage.existingClaim -}}
{{- .Values.storage.existingClaim -}}
{{- else -}}
{{- printf "%s-data" (include "kaas.fullname" .) -}}
{{- end -}}
{{- end -}}
