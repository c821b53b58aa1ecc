{{- define "execauth.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "execauth.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "execauth.labels" -}}
{{ include "execauth.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "execauth.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Settings shared by the pods and the migration job (which runs before the ConfigMap exists). */}}
{{- define "execauth.env" -}}
- name: EXECAUTH_SECRETS_DIR
  value: /run/secrets/execauth
- name: EXECAUTH_MIGRATE_ON_START
  value: "false"
{{- end -}}

{{- define "execauth.volumes" -}}
- name: secrets
  secret:
    secretName: {{ .Values.existingSecret }}
    defaultMode: 0440
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
{{- end -}}

{{- define "execauth.volumeMounts" -}}
- name: secrets
  mountPath: /run/secrets/execauth
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}
