"""The SGLang container's startup, readiness and liveness probe (an exec probe; stdlib only: it
runs with the Python of SGLang's image).

    python3 probe.py live|ready SCHEME SENTINEL_PORT SGLANG_PORT BUDGET_SECONDS

sentinel's verdict decides while sentinel answers: GET /verdict (live) or /verdict?ready (ready)
on 127.0.0.1, 200 passes and 503 fails (503 only on a confirmed canary or stall failure, or, for
ready, a server not ready yet). When sentinel does not answer (its sidecar crash-looping,
restarting, or not started yet) the probe falls back to SGLang's own GET /health: a broken
sidecar never turns into a restart of a healthy SGLang, and a hung SGLang is still restarted
while its sidecar is down. Exit 0 passes, 1 fails; the one line printed is what the kubelet
records in the pod's events.
"""

import http.client
import ssl
import sys


def get(scheme, port, path, timeout):
    """(status, first line of the body) or raises OSError / HTTPException when nobody answers."""
    if scheme == "https":
        # Loopback to the same pod: the certificate names the Service, not 127.0.0.1.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(512).decode("utf-8", "replace").strip().splitlines()
        return resp.status, body[0] if body else ""
    finally:
        conn.close()


def main(argv):
    if len(argv) != 6 or argv[1] not in ("live", "ready") or argv[2] not in ("http", "https"):
        print("usage: probe.py live|ready http|https SENTINEL_PORT SGLANG_PORT BUDGET_SECONDS")
        return 2
    mode, scheme = argv[1], argv[2]
    sentinel_port, sglang_port, budget = int(argv[3]), int(argv[4]), float(argv[5])
    # sentinel answers from memory within milliseconds; most of the budget is for /health, which
    # runs a 1-token generation (up to SGLANG_HEALTH_CHECK_TIMEOUT, 20 s by default).
    ask = min(5.0, budget / 4)
    path = "/verdict?ready" if mode == "ready" else "/verdict"
    try:
        status, line = get(scheme, sentinel_port, path, ask)
    except (OSError, http.client.HTTPException) as exc:
        why = "sentinel unreachable ({})".format(exc.__class__.__name__)
    else:
        if status in (200, 503):
            print("sentinel {}: {}".format(status, line))
            return 0 if status == 200 else 1
        why = "sentinel answered {}".format(status)
    try:
        status, _ = get("http", sglang_port, "/health", max(1.0, budget - ask - 1))
    except (OSError, http.client.HTTPException) as exc:
        print("{}; SGLang /health: {}".format(why, exc.__class__.__name__))
        return 1
    print("{}; SGLang /health: {}".format(why, status))
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
