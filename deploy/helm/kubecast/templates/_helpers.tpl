{{/* The chart's name, or nameOverride. */}}
{{- define "kubecast.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names: the release name when it already says kubecast, else "<release>-kubecast". */}}
{{- define "kubecast.fullname" -}}
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

{{/* What selects kubecast's Pod; never changes between upgrades. */}}
{{- define "kubecast.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubecast.name" . }}
{{- end }}

{{/* Every object's labels: the base's two, and the two Helm adds by convention. */}}
{{- define "kubecast.labels" -}}
{{ include "kubecast.selectorLabels" . }}
app.kubernetes.io/part-of: kubecast
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kubecast.serviceAccountName" -}}
{{- default (include "kubecast.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* Where the state volume is mounted; the config's state.dir. */}}
{{- define "kubecast.stateDir" -}}/var/lib/kubecast{{- end }}

{{/* The config file: the user's config, with the parts the Deployment decides. */}}
{{- define "kubecast.config" -}}
{{- $config := deepCopy .Values.config }}
{{- if .Values.highAvailability.enabled }}
{{- $_ := set $config "leader_election" (merge (dict "enabled" true "lease" .Values.highAvailability.lease) (default dict $config.leader_election)) }}
{{- if gt (int .Values.highAvailability.shards) 1 }}
{{- $_ := set $config "sharding" (merge (dict "shards" (int .Values.highAvailability.shards)) (default dict $config.sharding)) }}
{{- end }}
{{- else }}
{{- $_ := set $config "state" (merge (dict "dir" (include "kubecast.stateDir" .)) (default dict $config.state)) }}
{{- end }}
{{- $_ := set $config "metrics" (dict "address" (printf "0.0.0.0:%v" .Values.metrics.port)) }}
{{- toYaml $config }}
{{- end }}
