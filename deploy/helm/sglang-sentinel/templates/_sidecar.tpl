{{- /* The SGLang container. Arguments: dict "root" $ "lws" <bool> "leader" <bool>. */ -}}
{{- define "sentinel.sglangContainer" -}}
{{- $v := .root.Values -}}
{{- $s := $v.sglang -}}
name: sglang
image: {{ $s.image.repository }}:{{ $s.image.tag }}
imagePullPolicy: {{ $s.image.pullPolicy }}
command: ["python3", "-m", "sglang.launch_server"]
args:
  {{- toYaml $s.args | nindent 2 }}
  # Beyond loopback for the API Service (sglang.host); sentinel uses 127.0.0.1. The API has no
  # auth of its own unless --api-key is given (existingSecret): networkPolicy.apiFrom limits who
  # reaches it.
  - --host={{ $s.host }}
  - --port={{ $s.port }}
  - --enable-metrics
  - --served-model-name={{ $s.servedModelName }}
  {{- if $v.existingSecret }}
  # From the Secret (key api-key) through the environment; kubelet expands $(VAR) in args.
  - --api-key=$(SGLANG_API_KEY)
  {{- end }}
  {{- if .lws }}
  - --dist-init-addr=$(LWS_LEADER_ADDRESS):20000
  - --nnodes=$(LWS_GROUP_SIZE)
  - --node-rank=$(LWS_WORKER_INDEX)
  {{- end }}
{{- if or $v.existingSecret $s.env }}
env:
  {{- if $v.existingSecret }}
  - name: SGLANG_API_KEY
    valueFrom:
      secretKeyRef: {name: {{ $v.existingSecret }}, key: api-key, optional: true}
  {{- end }}
  {{- with $s.env }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- if .leader }}
ports:
  - {name: sglang-http, containerPort: {{ $s.port }}, protocol: TCP}
# An exec probe (files/probe.py, from the chart's ConfigMap): sentinel's verdict while sentinel
# answers, SGLang's own /health while it does not. A crash-looping sidecar must never get a
# healthy SGLang restarted (a model reload of minutes), and a hung SGLang must still be restarted
# while the sidecar is down.
{{- $probe := list "python3" "/etc/sentinel-probe/probe.py" }}
{{- $args := list (include "sentinel.scheme" .root | lower) ($v.exporter.port | toString) ($s.port | toString) }}
startupProbe:
  # Passes once the server is ready: liveness waits for the model load, up to
  # periodSeconds x failureThreshold.
  exec:
    command: {{ concat $probe (list "ready") $args (list ($v.sidecar.readinessProbe.timeoutSeconds | toString)) | toJson }}
  periodSeconds: {{ $v.sidecar.startupProbe.periodSeconds }}
  timeoutSeconds: {{ $v.sidecar.readinessProbe.timeoutSeconds }}
  failureThreshold: {{ $v.sidecar.startupProbe.failureThreshold }}
livenessProbe:
  # Fails only on sentinel's 503 (a confirmed canary or stall failure) or, sentinel down, on
  # SGLang's /health failing.
  exec:
    command: {{ concat $probe (list "live") $args (list ($v.sidecar.livenessProbe.timeoutSeconds | toString)) | toJson }}
  periodSeconds: {{ $v.sidecar.livenessProbe.periodSeconds }}
  timeoutSeconds: {{ $v.sidecar.livenessProbe.timeoutSeconds }}
  failureThreshold: {{ $v.sidecar.livenessProbe.failureThreshold }}
readinessProbe:
  exec:
    command: {{ concat $probe (list "ready") $args (list ($v.sidecar.readinessProbe.timeoutSeconds | toString)) | toJson }}
  periodSeconds: {{ $v.sidecar.readinessProbe.periodSeconds }}
  timeoutSeconds: {{ $v.sidecar.readinessProbe.timeoutSeconds }}
  failureThreshold: {{ $v.sidecar.readinessProbe.failureThreshold }}
{{- end }}
resources:
  {{- toYaml $s.resources | nindent 2 }}
volumeMounts:
  - {name: dshm, mountPath: /dev/shm}
  {{- if .leader }}
  - {name: sentinel-probe, mountPath: /etc/sentinel-probe, readOnly: true}
  {{- end }}
  {{- with $s.volumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- /* A pod template. Arguments: dict "root" $ "lws" <bool> "leader" <bool>. */ -}}
{{- define "sentinel.sglangPod" -}}
{{- $v := .root.Values -}}
metadata:
  labels:
    {{- include "sentinel.selectorLabels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ if .leader }}sglang{{ else }}sglang-worker{{ end }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if or $v.podAnnotations .leader }}
  annotations:
    {{- if .leader }}
    checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
    {{- end }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
spec:
  {{- include "sentinel.podCommon" .root | nindent 2 }}
  terminationGracePeriodSeconds: {{ $v.sidecar.terminationGracePeriodSeconds }}
  {{- if .leader }}
  initContainers:
    - {{- include "sentinel.container" (dict "root" .root "sidecar" true "host" "127.0.0.1" "port" $v.sglang.port "model" $v.sglang.servedModelName) | nindent 6 }}
  {{- end }}
  containers:
    - {{- include "sentinel.sglangContainer" . | nindent 6 }}
  volumes:
    - name: dshm
      emptyDir: {medium: Memory}
    {{- if .leader }}
    - name: sentinel-probe
      configMap: {name: {{ include "sentinel.fullname" .root }}, items: [{key: probe.py, path: probe.py}]}
    {{- include "sentinel.volumes" (dict "root" .root) | nindent 4 }}
    {{- end }}
    {{- with $v.sglang.volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- include "sentinel.podPlacement" .root | nindent 2 }}
{{- end -}}
