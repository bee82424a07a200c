{{/* Names: <release>-otel-rl unless the release name already contains the chart's name. */}}
{{- define "otel-rl.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "otel-rl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component (agent, gateway): stable across upgrades. */}}
{{- define "otel-rl.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "otel-rl.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "otel-rl.gatewayHost" -}}
{{ include "otel-rl.fullname" . }}-gateway.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}

{{- define "otel-rl.tlsSecret" -}}
{{- if .Values.secure.tls.existingSecret -}}
{{ .Values.secure.tls.existingSecret }}
{{- else -}}
{{- if not (and .Values.secure.tls.crt .Values.secure.tls.key .Values.secure.tls.ca) -}}
{{- fail "secure.enabled needs secure.tls.existingSecret, or all of secure.tls.crt, secure.tls.key and secure.tls.ca" -}}
{{- end -}}
{{ include "otel-rl.fullname" . }}-tls
{{- end -}}
{{- end -}}

{{- define "otel-rl.tokenSecret" -}}
{{- if .Values.secure.token.existingSecret -}}
{{ .Values.secure.token.existingSecret }}
{{- else -}}
{{- if not .Values.secure.token.value -}}
{{- fail "secure.enabled needs secure.token.existingSecret or secure.token.value" -}}
{{- end -}}
{{ include "otel-rl.fullname" . }}-token
{{- end -}}
{{- end -}}

{{/* The collector's memory_limiter from the container's memory: refuse above 80 %, spike allowance 20 % of that. */}}
{{- define "otel-rl.memoryEnv" -}}
{{- $limit := div (mul (int .memoryMiB) 4) 5 -}}
- name: OTEL_RL_COLLECTOR_MEMORY_LIMIT_MIB
  value: {{ $limit | quote }}
- name: OTEL_RL_COLLECTOR_MEMORY_SPIKE_MIB
  value: {{ div $limit 5 | quote }}
{{- end -}}

{{- define "otel-rl.resources" -}}
resources:
  requests:
    cpu: {{ .cpu | quote }}
    memory: {{ printf "%dMi" (int .memoryMiB) }}
  limits:
    memory: {{ printf "%dMi" (int .memoryMiB) }}
{{- end -}}

{{/* Environment and mounts of the secure profile (collector_config/secure.yaml reads these files). */}}
{{- define "otel-rl.secureEnv" -}}
- name: OTEL_RL_TLS_CERT_FILE
  value: /etc/otel-rl/tls/tls.crt
- name: OTEL_RL_TLS_KEY_FILE
  value: /etc/otel-rl/tls/tls.key
- name: OTEL_RL_BEARER_TOKEN_FILE
  value: /etc/otel-rl/token/{{ .Values.secure.token.key }}
{{- end -}}

{{- define "otel-rl.secureMounts" -}}
- name: tls
  mountPath: /etc/otel-rl/tls
  readOnly: true
- name: token
  mountPath: /etc/otel-rl/token
  readOnly: true
{{- end -}}

{{- define "otel-rl.secureVolumes" -}}
- name: tls
  secret:
    secretName: {{ include "otel-rl.tlsSecret" . }}
- name: token
  secret:
    secretName: {{ include "otel-rl.tokenSecret" . }}
{{- end -}}

{{/* Ports every collector listens on (collector_config/*.yaml defaults). */}}
{{- define "otel-rl.containerPorts" -}}
- name: otlp-grpc
  containerPort: 4317
  protocol: TCP
- name: otlp-http
  containerPort: 4318
  protocol: TCP
- name: health
  containerPort: 13133
  protocol: TCP
- name: metrics
  containerPort: 8888
  protocol: TCP
{{- end -}}

{{- define "otel-rl.probes" -}}
readinessProbe:
  httpGet:
    path: /
    port: health
  periodSeconds: 5
livenessProbe:
  httpGet:
    path: /
    port: health
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}
