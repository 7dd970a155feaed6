{{- define "sentinel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sentinel.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "sentinel.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "sentinel.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sentinel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sentinel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sentinel.labels" -}}
{{ include "sentinel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sentinel.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "sentinel.scheme" -}}
{{ if .Values.exporter.tls.secretName }}HTTPS{{ else }}HTTP{{ end }}
{{- end -}}

{{- /* The sentinel container: sidecar (in the SGLang pod) or fleet (its own Deployment).
       Arguments: dict "root" $ "sidecar" <bool> "host" "port" "model" (the SGLang server watched). */ -}}
{{- define "sentinel.container" -}}
{{- $v := .root.Values -}}
name: sentinel
image: {{ include "sentinel.image" .root }}
imagePullPolicy: {{ $v.image.pullPolicy }}
{{- if .sidecar }}
# A native sidecar: started before SGLang, kept running, stopped after it.
restartPolicy: Always
{{- end }}
args: ["run", "--config", "/etc/sentinel/config.toml"]
# The chart's own settings, as environment (over the TOML): values.yaml "config" can use any
# table without repeating one of these.
env:
  - {name: SENTINEL_STATE_DIR, value: /var/lib/sentinel}
  - {name: SENTINEL_LOG__FORMAT, value: json}
  - {name: SENTINEL_SERVER__MODE, value: external}
  - {name: SENTINEL_SERVER__HOST, value: {{ .host | quote }}}
  - {name: SENTINEL_SERVER__PORT, value: {{ .port | quote }}}
  - {name: SENTINEL_SERVER__CHECKS__CANARY__MODEL, value: {{ .model | quote }}}
  - {name: SENTINEL_EXPORTER__HOST, value: "0.0.0.0"}
  - {name: SENTINEL_EXPORTER__PORT, value: {{ $v.exporter.port | quote }}}
  - {name: SENTINEL_COLLECTORS__ENABLED, value: {{ toJson $v.collectors | quote }}}
  {{- if $v.exporter.basicAuth }}
  - {name: SENTINEL_EXPORTER__BASIC_AUTH_USERS_FILE, value: /etc/sentinel/web-users}
  {{- end }}
  {{- if $v.exporter.tls.secretName }}
  - {name: SENTINEL_EXPORTER__TLS__CERT_FILE, value: /etc/sentinel/tls/tls.crt}
  - {name: SENTINEL_EXPORTER__TLS__KEY_FILE, value: /etc/sentinel/tls/tls.key}
  {{- end }}
  {{- if $v.existingSecret }}
  - name: SENTINEL_SERVER__API_KEY
    valueFrom:
      secretKeyRef: {name: {{ $v.existingSecret }}, key: api-key, optional: true}
  {{- end }}
  {{- with $v.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
ports:
  - {name: sentinel-http, containerPort: {{ $v.exporter.port }}, protocol: TCP}
startupProbe:
  httpGet: {path: /healthz, port: sentinel-http, scheme: {{ include "sentinel.scheme" .root }}}
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  # /healthz: sentinel's own event loop; SGLang's health is /verdict, probed by SGLang's container.
  httpGet: {path: /healthz, port: sentinel-http, scheme: {{ include "sentinel.scheme" .root }}}
  periodSeconds: 30
  timeoutSeconds: 5
  failureThreshold: 3
resources:
  {{- toYaml $v.resources | nindent 2 }}
securityContext:
  {{- toYaml $v.securityContext | nindent 2 }}
volumeMounts:
  - {name: sentinel-config, mountPath: /etc/sentinel/config.toml, subPath: config.toml, readOnly: true}
  - {name: sentinel-state, mountPath: /var/lib/sentinel}
  - {name: sentinel-tmp, mountPath: /tmp}
  {{- if $v.exporter.basicAuth }}
  - {name: sentinel-web-users, mountPath: /etc/sentinel/web-users, subPath: web-users, readOnly: true}
  {{- end }}
  {{- if $v.exporter.tls.secretName }}
  - {name: sentinel-tls, mountPath: /etc/sentinel/tls, readOnly: true}
  {{- end }}
  {{- with $v.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- define "sentinel.volumes" -}}
{{- $v := .root.Values -}}
- name: sentinel-config
  configMap: {name: {{ include "sentinel.fullname" .root }}}
- name: sentinel-state
  emptyDir: {}
- name: sentinel-tmp
  emptyDir: {medium: Memory, sizeLimit: 64Mi}
{{- if $v.exporter.basicAuth }}
- name: sentinel-web-users
  secret: {secretName: {{ required "exporter.basicAuth needs existingSecret (key web-users)" $v.existingSecret }}, items: [{key: web-users, path: web-users}]}
{{- end }}
{{- if $v.exporter.tls.secretName }}
- name: sentinel-tls
  secret: {secretName: {{ $v.exporter.tls.secretName }}}
{{- end }}
{{- with $v.extraVolumes }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}

{{- /* The job/instance labels the rules expect (values.yaml "jobLabel"). Argument: instance source. */ -}}
{{- define "sentinel.relabelings" -}}
- action: replace
  targetLabel: job
  replacement: {{ .root.Values.jobLabel }}
- action: replace
  {{- if .instanceFrom }}
  sourceLabels: [{{ .instanceFrom }}]
  {{- else }}
  replacement: {{ .instance }}
  {{- end }}
  targetLabel: instance
{{- end -}}


{{- define "sentinel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sentinel.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* Pod-spec fields every pod of the chart shares (indented by the caller). Argument: $. */ -}}
{{- define "sentinel.podCommon" -}}
{{- $v := .Values -}}
serviceAccountName: {{ include "sentinel.serviceAccountName" . }}
# sentinel never talks to the Kubernetes API.
automountServiceAccountToken: false
{{- with $v.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "sentinel.podPlacement" -}}
{{- $v := .Values -}}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- /* A monitor endpoint's authentication: what secures the exporter secures its scrapes too.
       Arguments: dict "root" $ "monitor" <podMonitor or serviceMonitor values> "serverName" <default>.
       Explicit values in the monitor win over the ones derived from exporter.* / existingSecret. */ -}}
{{- define "sentinel.monitorAuth" -}}
{{- $v := .root.Values -}}
{{- $m := .monitor -}}
{{- if $m.basicAuth }}
basicAuth:
  {{- toYaml $m.basicAuth | nindent 2 }}
{{- else if $v.exporter.basicAuth }}
basicAuth:
  username: {name: {{ required "exporter.basicAuth needs existingSecret" $v.existingSecret }}, key: scrape-username}
  password: {name: {{ $v.existingSecret }}, key: scrape-password}
{{- end }}
{{- if $m.tlsConfig }}
tlsConfig:
  {{- toYaml $m.tlsConfig | nindent 2 }}
{{- else if $v.exporter.tls.secretName }}
tlsConfig:
  {{- if $v.exporter.tls.caKey }}
  ca:
    secret: {name: {{ $v.exporter.tls.secretName }}, key: {{ $v.exporter.tls.caKey }}}
  {{- with ($v.exporter.tls.serverName | default .serverName) }}
  serverName: {{ . }}
  {{- end }}
  {{- else }}
  insecureSkipVerify: true
  {{- end }}
{{- end }}
{{- with $m.bearerTokenSecret }}
bearerTokenSecret:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
