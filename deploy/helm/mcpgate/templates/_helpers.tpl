{{/* Names and labels shared by every object of the chart. */}}

{{- define "mcpgate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object name: the release name, with the chart name unless it is in it. */}}
{{- define "mcpgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "mcpgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcpgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "mcpgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mcpgate
{{- end }}

{{- define "mcpgate.configMapName" -}}
{{- .Values.existingConfigMap | default (printf "%s-config" (include "mcpgate.fullname" .)) }}
{{- end }}

{{- define "mcpgate.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-secrets" (include "mcpgate.fullname" .)) }}
{{- end }}
