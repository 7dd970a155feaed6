"""The checks: liveness (/health), generation (/health_generate), stall, correctness canaries.

Every probe returns a :class:`ProbeResult` and never raises: a refused connection, a timeout, a
malformed reply are all failures with a stable ``reason`` label.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.httpread import HttpReadError, read
from sglang_sentinel.sglang.series import loads_totals, server_total
from sglang_sentinel.supervise.settings import CanaryCheckSettings, CanarySettings

__all__ = [
    "ProbeResult",
    "StallDetector",
    "detect_garbage",
    "probe_canary",
    "probe_health",
    "read_progress",
]


@dataclass(frozen=True, slots=True)
class ProbeResult:
    probe: str  # "health", "health_generate", "stall", "canary_<name>"
    ok: bool
    duration: float  # seconds
    reason: str  # "ok" or a failure reason: refused, timeout, http_503, wrong_answer, garbage_empty, ...
    detail: str = ""
    # Only the /health family: distinguishes "starting" (refused) from "warming" (503).
    status_code: int | None = None
    # False: the probe could not tell (e.g. /metrics unreachable for the stall check); recorded,
    # but never counted towards a restart.
    conclusive: bool = True
    #: Wall clock of the result: the status page and ``sentinel status`` show its age.
    at: float = field(default_factory=time.time)


# Bodies the probes accept (sglang_sentinel.httpread: over this, "too_large"). /health answers a few bytes,
# a canary a few hundred tokens; SGLang's /metrics is ~100 KB at TP=8, the collector's own cap 32 MiB.
HEALTH_MAX_BYTES = 64 * 1024
CANARY_MAX_BYTES = 1 << 20
METRICS_MAX_BYTES = 32 << 20
LOADS_MAX_BYTES = 4 << 20
# Parsing /metrics text costs ~1 ms per 10 KB: over this it runs in a worker thread.
_PARSE_INLINE = 256 * 1024


def _fail_reason(exc: HttpReadError) -> str:
    # The probes' labels predate httpread ("refused", not "connect"): kept for the series.
    return "refused" if exc.reason == "connect" else exc.reason


async def probe_health(client: httpx.AsyncClient, path: str, probe: str, timeout_s: float) -> ProbeResult:
    t0 = time.monotonic()
    try:
        resp = await read(client, "GET", path, deadline_s=timeout_s, max_bytes=HEALTH_MAX_BYTES)
    except HttpReadError as exc:
        return ProbeResult(probe, False, time.monotonic() - t0, _fail_reason(exc), exc.detail[:200])
    dt = time.monotonic() - t0
    if resp.status_code == 200:
        return ProbeResult(probe, True, dt, "ok", status_code=200)
    return ProbeResult(probe, False, dt, f"http_{resp.status_code}", resp.text[:200], resp.status_code)


_NONPRINTABLE_OK = frozenset("\n\r\t")


def detect_garbage(text: str, *, max_nonprintable_ratio: float, max_repeats: int) -> str | None:
    """Why ``text`` looks like a broken model's output, or None.

    Catches what NaN logits / a wrong attention backend produce: nothing at all, one token over
    and over ("!!!!!!!!", "the the the ..."), or bytes that are not text.
    """
    stripped = text.strip()
    if not stripped:
        return "garbage_empty"
    bad = sum(1 for c in text if (not c.isprintable() and c not in _NONPRINTABLE_OK) or c == "\ufffd")
    if bad / len(text) > max_nonprintable_ratio:
        return "garbage_nonprintable"
    dense = "".join(stripped.split())
    if len(dense) >= max_repeats:
        _, top = Counter(dense).most_common(1)[0]
        if top / len(dense) >= 0.9:
            return "garbage_repeated"
    words = stripped.split()
    if len(words) >= max_repeats:
        _, top = Counter(words).most_common(1)[0]
        if top / len(words) >= 0.9:
            return "garbage_repeated"
    return None


def _chat_answer(data: Any) -> tuple[str, str | None]:
    """(text, finish_reason) of an OpenAI chat completion; raises ValueError if malformed."""
    choice = data["choices"][0]
    msg = choice["message"]
    # With a reasoning parser the answer is in content; when the whole budget went to thinking,
    # content is null and only reasoning_content has text.
    text = msg.get("content") or msg.get("reasoning_content") or ""
    if not isinstance(text, str):
        raise ValueError("content is not a string")
    reason = choice.get("finish_reason")
    return text, reason if isinstance(reason, str) else None


def _generate_answer(data: Any) -> tuple[str, str | None]:
    text = data["text"]
    if not isinstance(text, str):
        raise ValueError("text is not a string")
    fr = data.get("meta_info", {}).get("finish_reason")
    reason = fr.get("type") if isinstance(fr, dict) else fr
    return text, reason if isinstance(reason, str) else None


async def probe_canary(
    client: httpx.AsyncClient, canary: CanarySettings, settings: CanaryCheckSettings
) -> ProbeResult:
    probe = f"canary_{canary.name}"
    body: dict[str, Any]
    if settings.api == "chat":
        path = "/v1/chat/completions"
        body = {
            "model": settings.model,
            "messages": [{"role": "user", "content": canary.prompt}],
            "temperature": 0,
            "max_tokens": canary.max_tokens,
            "stream": False,
            # GLM-5 thinks by default; a known-answer check wants the answer, not the thoughts.
            "chat_template_kwargs": {"enable_thinking": False},
        }
    else:
        path = "/generate"
        body = {
            "text": canary.prompt,
            "sampling_params": {"temperature": 0, "max_new_tokens": canary.max_tokens},
        }
    t0 = time.monotonic()
    try:
        resp = await read(
            client, "POST", path, json_body=body, deadline_s=settings.timeout, max_bytes=CANARY_MAX_BYTES
        )
    except HttpReadError as exc:
        return ProbeResult(probe, False, time.monotonic() - t0, _fail_reason(exc), exc.detail[:200])
    dt = time.monotonic() - t0
    if resp.status_code != 200:
        return ProbeResult(probe, False, dt, f"http_{resp.status_code}", resp.text[:200])
    try:
        data = resp.json()
        text, finish = _chat_answer(data) if settings.api == "chat" else _generate_answer(data)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        return ProbeResult(probe, False, dt, "bad_reply", f"{type(exc).__name__}: {exc}"[:200])
    shown = text[:200]
    if finish == "abort":
        return ProbeResult(probe, False, dt, "abort", shown)
    garbage = detect_garbage(
        text, max_nonprintable_ratio=settings.max_nonprintable_ratio, max_repeats=settings.max_repeats
    )
    if garbage is not None:
        return ProbeResult(probe, False, dt, garbage, shown)
    if not re.search(canary.expect, text, re.IGNORECASE):
        return ProbeResult(probe, False, dt, "wrong_answer", shown)
    return ProbeResult(probe, True, dt, "ok", shown)


@dataclass(frozen=True, slots=True)
class Progress:
    decode_tokens: float | None  # sglang:realtime_tokens_total{mode="decode"}, once per DP replica
    running: float | None  # requests in flight now
    #: Where ``running`` came from: ``loads_aggregate`` / ``loads_ranks`` (``/v1/loads``, live;
    #: 0.5.23 has no aggregate, its per-DP-rank entries are summed), ``metrics_gauge`` (the
    #: sampled ``sglang:num_running_reqs``: /v1/loads failed or is absent), or ``none``.
    running_source: str = "none"


def _metrics_progress(text: str) -> tuple[float | None, float | None]:
    decode: list[tuple[dict[str, str], float]] = []
    running: list[tuple[dict[str, str], float]] = []
    for family in text_string_to_metric_families(text):
        # The parser strips _total from counter family names.
        if family.name in ("sglang:realtime_tokens", "sglang:realtime_tokens_total"):
            decode.extend(
                (s.labels, s.value)
                for s in family.samples
                if s.name.endswith("_total") and s.labels.get("mode") == "decode"
            )
        elif family.name == "sglang:num_running_reqs":
            # Priority scheduling writes a total plus one series per priority; all-scheduler
            # metrics repeat the figure on every TP rank: server_total takes it once.
            running.extend((s.labels, s.value) for s in family.samples)
    return server_total(decode), server_total(running)


async def read_progress(client: httpx.AsyncClient, timeout_s: float) -> Progress:
    """Decode-token counter from /metrics, running requests from /v1/loads (live; the /metrics gauge
    refreshes only on log events). Raises ValueError on failure (the reason first: "timeout: ...").

    ``timeout_s`` bounds the whole check: /metrics and /v1/loads together.
    """
    deadline = time.monotonic() + timeout_s
    try:
        resp = await read(
            client, "GET", "/metrics", deadline_s=timeout_s, max_bytes=METRICS_MAX_BYTES, expect_ok=True
        )
    except HttpReadError as exc:
        raise ValueError(f"/metrics {exc}") from None
    text = resp.text
    if len(text) > _PARSE_INLINE:
        decode, running_gauge = await asyncio.to_thread(_metrics_progress, text)
    else:
        decode, running_gauge = _metrics_progress(text)
    left = deadline - time.monotonic()
    try:
        # /v1/loads round-trips to the scheduler: a wedged one never answers, so do not let it
        # eat the whole check timeout; the gauge fallback still shows the last running count.
        if left > 0:
            loads = await read(
                client,
                "GET",
                "/v1/loads",
                params={"include": "core"},
                deadline_s=min(timeout_s / 3, left),
                max_bytes=LOADS_MAX_BYTES,
                expect_ok=True,
            )
            totals = loads_totals(loads.json())
            source = "loads_aggregate" if totals.source == "aggregate" else "loads_ranks"
            return Progress(decode, totals.running, source)
    except (HttpReadError, ValueError, AttributeError):
        pass  # older servers, a wedged scheduler: the (sampled) gauge, and Progress says so
    return Progress(decode, running_gauge, "metrics_gauge" if running_gauge is not None else "none")


class StallDetector:
    """Flags a server whose decode counter stops while requests are in flight.

    SGLang's own watchdog needs 300-450 s to notice; this fires after ``stall_after`` seconds.
    """

    def __init__(self, stall_after: float) -> None:
        self.stall_after = stall_after
        self._last_value: float | None = None
        self._last_change: float | None = None

    def reset(self) -> None:
        self._last_value = None
        self._last_change = None

    def rebase(self, now: float) -> None:
        """The daemon was away (see :mod:`~sglang_sentinel.supervise.gaps`): time not observed is not
        stall time, so the window restarts at ``now`` and needs ``stall_after`` of fresh watching."""
        if self._last_change is not None:
            self._last_change = now

    def observe(self, progress: Progress, now: float) -> ProbeResult:
        if progress.decode_tokens is None:
            return ProbeResult(
                "stall",
                False,
                0.0,
                "unsupported",
                "no sglang:realtime_tokens_total{mode=decode} in /metrics",
                conclusive=False,
            )
        value = progress.decode_tokens
        busy = (progress.running or 0) > 0
        source = f"running from {progress.running_source}"
        if self._last_value is None or value != self._last_value or not busy:
            # Idle time is not a stall: restart the clock whenever nothing is in flight.
            self._last_value = value
            self._last_change = now
            return ProbeResult("stall", True, 0.0, "ok", source)
        assert self._last_change is not None
        still = now - self._last_change
        if still >= self.stall_after:
            return ProbeResult(
                "stall",
                False,
                0.0,
                "stalled",
                f"decode tokens stuck at {value:g} for {still:.0f} s with {progress.running:g} running"
                f" ({source})",
            )
        return ProbeResult("stall", True, 0.0, "ok", source)
