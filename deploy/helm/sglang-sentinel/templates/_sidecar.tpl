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
  # Loopback: SGLang's inference API has no auth of its own unless --api-key is given; sentinel
  # re-exposes its /metrics and answers the kubelet's probes for it.
  - --host=127.0.0.1
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
# SGLang listens on loopback, out of the kubelet's reach: its probes ask sentinel (same pod,
# so the same address; by number: a named port is looked up in the probed container only).
startupProbe:
  # 200 once the server is ready: liveness waits for the model load, up to
  # periodSeconds x failureThreshold.
  httpGet: {path: "/verdict?ready", port: {{ $v.exporter.port }}, scheme: {{ include "sentinel.scheme" .root }}}
  periodSeconds: {{ $v.sidecar.startupProbe.periodSeconds }}
  failureThreshold: {{ $v.sidecar.startupProbe.failureThreshold }}
livenessProbe:
  # 503 only on a confirmed canary (wrong/garbage answers) or stall failure; 200 while unsure.
  httpGet: {path: "/verdict", port: {{ $v.exporter.port }}, scheme: {{ include "sentinel.scheme" .root }}}
  periodSeconds: {{ $v.sidecar.livenessProbe.periodSeconds }}
  timeoutSeconds: {{ $v.sidecar.livenessProbe.timeoutSeconds }}
  failureThreshold: {{ $v.sidecar.livenessProbe.failureThreshold }}
readinessProbe:
  httpGet: {path: "/verdict?ready", port: {{ $v.exporter.port }}, scheme: {{ include "sentinel.scheme" .root }}}
  periodSeconds: 10
  timeoutSeconds: 5
{{- end }}
resources:
  {{- toYaml $s.resources | nindent 2 }}
volumeMounts:
  - {name: dshm, mountPath: /dev/shm}
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
  {{- if .leader }}
  serviceAccountName: {{ include "sentinel.fullname" .root }}
  {{- end }}
  automountServiceAccountToken: false
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
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
    {{- include "sentinel.volumes" (dict "root" .root) | nindent 4 }}
    {{- end }}
    {{- with $v.sglang.volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
