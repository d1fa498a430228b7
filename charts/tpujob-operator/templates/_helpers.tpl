{{/* Names, labels and small computed values shared by the templates. */}}

{{- define "tpujob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name; 52 characters leave room for the longest suffix. */}}
{{- define "tpujob-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tpujob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tpujob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpujob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tpujob-operator.labels" -}}
helm.sh/chart: {{ include "tpujob-operator.chart" . }}
{{ include "tpujob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tpujob-operator
{{- end }}

{{- define "tpujob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tpujob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tpujob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "tpujob-operator.leaseName" -}}
{{- default (include "tpujob-operator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- define "tpujob-operator.cordonStateName" -}}
{{- printf "%s-cordon-state" (include "tpujob-operator.fullname" .) | trunc 253 }}
{{- end }}

{{- define "tpujob-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "tpujob-operator.fullname" .) }}
{{- end }}

{{/* PromQL matchers (no braces) selecting this release's series in the alert expressions. */}}
{{- define "tpujob-operator.metricSelector" -}}
{{- if .Values.prometheusRule.metricSelector }}
{{- .Values.prometheusRule.metricSelector }}
{{- else }}
{{- printf "job=%q,namespace=%q" (include "tpujob-operator.metricsServiceName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/* The Subject every binding grants to. */}}
{{- define "tpujob-operator.subject" -}}
- kind: ServiceAccount
  name: {{ include "tpujob-operator.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
