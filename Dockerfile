# sglang-sentinel in a container.
#
#   scripts/build-image                   # tagged sglang-sentinel:<version>, labels set, size printed
#   docker run --rm -p 9480:9480 sglang-sentinel            # embedded default: the simulator
#   docker run --rm --network host --gpus all \
#     -v /etc/sentinel:/etc/sentinel:ro -v sentinel-state:/var/lib/sentinel \
#     sglang-sentinel run --config /etc/sentinel/config.toml  # beside a real SGLang (mode external)
#
# In a container sentinel cannot restart a host systemd unit; use server.mode = "external" (watch,
# probe, load, export) or "child" with SGLang inside the same image. GPU series need the NVIDIA
# container toolkit (--gpus all); without it the gpu collector reports "library not found".
#
# State volume: the daemon runs as uid/gid 10001 and writes /var/lib/sentinel (restart history,
# runs.jsonl, calibrations). A named volume is created with the image's ownership; a bind mount
# must be made writable for 10001 first: `install -d -o 10001 -g 10001 /srv/sentinel-state`.
#
# Health: HEALTHCHECK only *reports* (docker ps shows "unhealthy", `docker inspect` the probe
# output). Plain Docker and `--restart` never act on it: --restart reacts to the process exiting.
# To restart an unhealthy container, let something act on the health state: an orchestrator's
# liveness probe on GET /healthz (Kubernetes livenessProbe, Nomad check_restart), Docker Swarm
# (replaces unhealthy tasks), or an autoheal container (willfarrell/autoheal, label
# autoheal=true). A stalled scheduler does not make the daemon exit by itself (README, "Docker").

# The base pinned by exact tag and by the digest of its multi-architecture index: a rebuild gets the
# same bytes. To move it: `docker buildx imagetools inspect python:3.11.N-slim-bookworm` for the new
# digest; tests/release/test_release.py requires both the tag and the digest.
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE CHANGELOG.md MANIFEST.in ./
COPY daemon ./daemon
RUN python -m venv /opt/sentinel \
 && /opt/sentinel/bin/pip install --no-cache-dir --disable-pip-version-check .

FROM ${BASE}
# Set by scripts/build-image: the package version (sglang_sentinel.__version__) and the git commit.
ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sglang-sentinel" \
      org.opencontainers.image.description="Keeps an SGLang server up, loads it on a schedule, exports it all to Prometheus." \
      org.opencontainers.image.source="https://pypi.org/project/sglang-sentinel/" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /opt/sentinel /opt/sentinel
RUN groupadd --system --gid 10001 sentinel \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/sentinel --create-home --shell /usr/sbin/nologin sentinel
ENV PATH=/opt/sentinel/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SENTINEL_STATE_DIR=/var/lib/sentinel \
    SENTINEL_LOG__FORMAT=json
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/sentinel
VOLUME ["/var/lib/sentinel"]
EXPOSE 9480
# /healthz answers 503 when the daemon's scheduler has stalled. This marks the container
# unhealthy; it does not restart it (see the header).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9480/healthz', timeout=4).status != 200)"]
# SIGTERM: cancel the load run in progress, stop the server, exit 0 (docker stop's default signal).
STOPSIGNAL SIGTERM
ENTRYPOINT ["sentinel"]
# Listen beyond loopback inside the container so -p 9480:9480 reaches the exporter.
CMD ["run", "--listen", "0.0.0.0:9480"]
