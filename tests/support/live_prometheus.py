"""A real Prometheus server and a real ``sentinel run`` daemon, as subprocesses on loopback ports.

Shared by the tests that check dashboards and alert rules against what Prometheus really
evaluates (tests/prom). Import as ``from support.live_prometheus import ...`` (``tests/`` is on
``sys.path`` through the rootdir conftest). Prometheus is the Debian package ``prometheus``
(scripts/test installs it); tests mark themselves with :data:`requires_prometheus`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.daemon_proc import DaemonProcess, descendants, free_port

__all__ = [
    "PROMETHEUS",
    "PROMTOOL",
    "Box",
    "DaemonProcess",
    "Prometheus",
    "descendants",
    "free_port",
    "has_data",
    "requires_prometheus",
    "scale_durations",
]

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
requires_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus missing (Debian package prometheus; scripts/test installs it)"
)


def _wait(what: str, check: Callable[[], bool], timeout: float, tail: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            if check():
                return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{tail()}")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _static(name: str, address: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"instance": name, **(extra or {})}
    if "/" in address:
        address, path = address.split("/", 1)
        labels["__metrics_path__"] = "/" + path
    return {"targets": [address], "labels": labels}


class Prometheus:
    """``prometheus`` scraping ``targets`` every ``interval``.

    ``targets``: ``{"instance label": "host:port"}``, or ``"host:port/path"`` for a target with a
    metrics path of its own; ``target_labels`` are added to each (e.g. the ``namespace``/``pod``
    the Operator's PodMonitor would set). ``extra_scrape_configs`` are more jobs, verbatim.
    """

    def __init__(
        self,
        workdir: Path,
        targets: dict[str, str],
        *,
        interval: str = "1s",
        rule_files: Iterable[Path] = (),
        metrics_path: str = "/metrics",
        target_labels: dict[str, str] | None = None,
        extra_scrape_configs: Iterable[dict[str, Any]] = (),
    ) -> None:
        assert PROMETHEUS is not None
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # JSON is YAML: no YAML library needed to write the config.
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": "sentinel",
                    "scrape_timeout": interval,
                    "metrics_path": metrics_path,
                    "static_configs": [
                        _static(name, address, target_labels) for name, address in targets.items()
                    ],
                },
                *extra_scrape_configs,
            ],
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config, indent=1))
        self.log = workdir / "prometheus.log"
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._client = httpx.Client(base_url=self.url, timeout=10)
        _wait("prometheus /-/ready", self._ready, 30, self.tail)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n{self.tail()}")
        return self._client.get("/-/ready").status_code == 200

    def tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()[-30:]
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            for target in self._client.get("/api/v1/targets").json()["data"]["activeTargets"]:
                lines.append(f"target {target['scrapeUrl']}: {target['health']} {target['lastError']}")
        return "\n".join(lines)

    def api(self, path: str, **params: Any) -> Any:
        resp = self._client.get("/api/v1/" + path, params=params)
        body = resp.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        result: list[dict[str, Any]] = self.api("query", **params)["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query_range", query=expr, start=start, end=end, step=step)[
            "result"
        ]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        values: list[str] = self.api(f"label/{label}/values", **{"match[]": match})
        return values

    def alerts(self) -> dict[str, str]:
        """alertname -> state (pending or firing) of the active alerts."""
        out: dict[str, str] = {}
        for alert in self.api("alerts")["alerts"]:
            name = alert["labels"]["alertname"]
            # One alert name can have several series: firing wins over pending.
            if out.get(name) != "firing":
                out[name] = alert["state"]
        return out

    def wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        _wait(what, check, timeout, self.tail)

    def stop(self) -> None:
        self._client.close()
        _kill_group(self.proc)
        self._out.close()


def has_data(result: list[dict[str, Any]]) -> bool:
    """A query_range/query result that a panel would draw: some finite value."""
    for series in result:
        points = series.get("values") or [series.get("value")]
        if any(p is not None and math.isfinite(float(p[1])) for p in points):
            return True
    return False


_DURATION = re.compile(r"(?<![\w.])(\d+)([smhdw])(?![\w])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# A duration in seconds written as a product in an expression (`time() - x > 3 * 3600`): a count
# times the seconds of a unit. A bare number of seconds (`> 10800`) cannot be told from any other
# number and is not scaled, so a rule that compares seconds writes them as such a product or as a
# count of a unit (below; test_alerts_live.py checks ReferenceRunsStale's).
_SECONDS_PRODUCT = re.compile(r"(?<![\w.])(\d+) \* (60|3600|86400|604800)(?![\w.])")
# Or the other way round, seconds divided into a unit and compared with a count of that unit
# (`(time() - x) / 3600 > 3`, the threshold in hours, as the chart's `threshold` override reads it):
# the count is scaled.
_UNIT_QUOTIENT = re.compile(r"/ (60|3600|86400|604800) > (\d+(?:\.\d+)?)(?![\w.])")


def scale_durations(rules: str, factor: float, *, min_range_ms: int) -> str:
    """``rules`` (alerts.yml text) with every ``for:``, range and ``offset`` duration times ``factor``,
    and every duration in seconds written ``N * 60|3600|86400|604800`` (or compared as a count of such
    a unit, ``/ 3600 > N``) in an expression too.

    A range shorter than ``min_range_ms`` is raised to it: rate() and increase() need two samples
    in their window, so a window must span a few scrapes whatever the factor.
    """

    def scaled(seconds: int, floor_ms: int) -> str:
        return f"{max(floor_ms, round(seconds * factor * 1000))}ms"

    def fix_for(m: re.Match[str]) -> str:
        return m.group(1) + scaled(int(m.group(2)) * _UNIT_S[m.group(3)], 0)

    def fix_range(m: re.Match[str]) -> str:
        return "[" + scaled(int(m.group(1)) * _UNIT_S[m.group(2)], min_range_ms) + "]"

    def fix_offset(m: re.Match[str]) -> str:
        return "offset " + scaled(int(m.group(1)) * _UNIT_S[m.group(2)], min_range_ms)

    def fix_product(m: re.Match[str]) -> str:
        # Seconds compared with seconds (time() minus a timestamp): a plain number, to the ms.
        return f"{int(m.group(1)) * int(m.group(2)) * factor:.3f}".rstrip("0").rstrip(".")

    rules = re.sub(r"^(\s+for: )(\d+)([smhdw])\s*$", fix_for, rules, flags=re.MULTILINE)
    rules = re.sub(r"\[(\d+)([smhdw])\]", fix_range, rules)
    rules = _SECONDS_PRODUCT.sub(fix_product, rules)
    rules = _UNIT_QUOTIENT.sub(lambda m: f"/ {m.group(1)} > {float(m.group(2)) * factor:.6g}", rules)
    return re.sub(r"\boffset (\d+)([smhdw])\b", fix_offset, rules)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def to_toml(doc: dict[str, Any], prefix: str = "") -> str:
    plain = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    out = ([f"[{prefix}]"] if prefix and plain else []) + plain
    for key, value in doc.items():
        if isinstance(value, dict):
            out.append(to_toml(value, f"{prefix}.{key}" if prefix else key))
    return "\n".join(out) + "\n"


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def fast_config(state: Path, server_port: int, exporter_port: int) -> dict[str, Any]:
    return {
        "state_dir": str(state),
        "log": {"format": "json"},
        "server": {
            "profile": "fastsim",
            "port": server_port,
            "stop_timeout": 5,
            "startup_poll_interval": 0.2,
            "checks": {
                "health": {"interval": 0.5},
                "health_generate": {"interval": 1},
                "stall": {"interval": 1},
                "canary": {"interval": 1, "retry_interval": 0.5},
            },
            "restart": {"backoff_initial": 0.2},
            "profiles": {"fastsim": {"kind": "sim", "sim_speed": 100}},
        },
        "exporter": {"port": exporter_port},
        "collectors": {
            "gpu": {"backend": "fake", "fake_devices": 2, "interval_seconds": 1, "timeout_seconds": 1}
        },
        "schedule": {
            "warmup_seconds": 0.3,
            "reference_exclusion_seconds": 0,
            "calibrate_when_missing": True,
            "recalibrate_cron": "",
            "profiles": {
                "reference": {
                    "num_prompts": 8,
                    "request_rate": 50,
                    "input_len": 16,
                    "output_len": 16,
                    "interval_seconds": 3,
                    "run_on_ready": True,
                }
            },
            "polite": {"check_interval_seconds": 0.2},
            "breaker": {"check_interval_seconds": 0.2},
        },
        # A sweep of a few seconds: concurrency 1, 2, 4 of 16-token requests.
        "calibration": {
            "input_len": 16,
            "output_len": 16,
            "max_concurrency": 4,
            "step_min_requests": 4,
            "metrics_interval": 0.2,
            # These tests need *a* capacity on the dashboards, not an accurate one: on a busy box
            # every step may be marked client-bound, and the sweep would end inconclusive.
            "client_lag_tolerance": 1.0,
            "slo": {"ttft_seconds": 30},
        },
    }


class Box:
    """A sentinel config that makes everything happen within seconds, and its daemons.

    The simulator at high speed as the daemon's child (a ``kind = "sim"`` launch profile), checks
    every second or faster, the fake GPU backend, a tiny calibration and small reference runs.
    ``overrides`` are merged into the config (nested dicts are TOML tables).
    """

    def __init__(self, workdir: Path, overrides: dict[str, Any]) -> None:
        self.workdir = workdir
        self.server_port = free_port()
        self.exporter_port = free_port()
        self.config = workdir / "sentinel.toml"
        self.rewrite(overrides)
        self.daemons: list[DaemonProcess] = []

    def rewrite(self, overrides: dict[str, Any]) -> None:
        """The config file again with other ``overrides`` (same ports and state directory), as an
        operator edits it: a running daemon sees it on SIGHUP (what it can change live) or a restart."""
        doc = _merge(fast_config(self.workdir / "state", self.server_port, self.exporter_port), overrides)
        self.config.write_text(to_toml(doc))

    @property
    def exporter(self) -> str:
        return f"127.0.0.1:{self.exporter_port}"

    def start(self) -> DaemonProcess:
        # One log for all of a box's daemons, unbuffered so that a failing test's tail shows the
        # last lines, not the last block; checks here retry on these only, polled every 0.1 s.
        daemon = DaemonProcess(
            self.config,
            self.exporter_port,
            self.workdir / "sentinel.log",
            env={"PYTHONUNBUFFERED": "1"},
            append=True,
            tolerate=(httpx.HTTPError, KeyError, ValueError),
            poll=0.1,
        )
        self.daemons.append(daemon)
        return daemon

    def close(self) -> None:
        for d in self.daemons:
            d.kill()
