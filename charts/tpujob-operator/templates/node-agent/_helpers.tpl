{{/* Names of the node agent's objects. */}}

{{- define "tpujob-operator.nodeAgentName" -}}
{{- printf "%s-node-agent" (include "tpujob-operator.fullname" .) }}
{{- end }}

{{- define "tpujob-operator.nodeAgentNamespace" -}}
{{- default .Release.Namespace .Values.nodeAgent.namespace }}
{{- end }}

{{- define "tpujob-operator.nodeAgentServiceAccountName" -}}
{{- if .Values.nodeAgent.serviceAccount.create }}
{{- default (include "tpujob-operator.nodeAgentName" .) .Values.nodeAgent.serviceAccount.name }}
{{- else }}
{{- required "nodeAgent.serviceAccount.name is required when nodeAgent.serviceAccount.create is false" .Values.nodeAgent.serviceAccount.name }}
{{- end }}
{{- end }}
