"""Fault catalogue of the simulator: names, parameters, parsing, and the set of armed faults.

A fault spec is ``NAME`` or ``NAME:key=value,key=value`` (CLI ``--fault``, repeatable), or the
JSON ``{"name": NAME, "params": {...}}`` of the control API. Durations are server seconds: they
are divided by ``--speed`` like everything else. ``after`` (every fault) delays activation by
that many server seconds after the server is ready (CLI) or after the control call.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["FAULTS", "Fault", "FaultError", "FaultSet", "FaultSpec", "parse_fault_spec"]


class FaultError(ValueError):
    """A fault spec that names an unknown fault or carries a bad parameter."""


@dataclass(frozen=True, slots=True)
class FaultSpec:
    name: str
    description: str
    # parameter name -> default value (the type of the default is the parameter's type)
    params: dict[str, float | str]


_AFTER: Final = {"after": 0.0}

FAULTS: Final[dict[str, FaultSpec]] = {
    spec.name: spec
    for spec in (
        FaultSpec(
            "crash",
            "scheduler exception: log 'Scheduler hit an exception' with a traceback, then SIGKILL the "
            "process (phase=startup: during weight loading, before the port listens); text=tokenizer|nan|"
            "died_init|subprocess: that version's other crash texts (docs/sim.md)",
            {**_AFTER, "phase": "serving", "text": "sampler"},
        ),
        FaultSpec(
            "hang",
            "the scheduler stops making progress (no tokens, /health 503 after health_timeout); the "
            "watchdog kills the server after `watchdog` server seconds (0 = never)",
            {**_AFTER, "watchdog": 300.0},
        ),
        FaultSpec(
            "stall",
            "the scheduler pauses for `duration` server seconds, then resumes",
            {**_AFTER, "duration": 30.0},
        ),
        FaultSpec(
            "garbage",
            "generated text becomes garbage (style=bang: '!!!!', nan: 'NaN', random: junk) while /health "
            "stays 200 and token counts stay right",
            {**_AFTER, "style": "bang"},
        ),
        FaultSpec(
            "slow_start",
            "start-up takes longer: port refused for `refuse` server seconds, then /health 503 (warm-up) "
            "for `warmup` server seconds, then ready",
            {"refuse": 30.0, "warmup": 30.0},
        ),
        FaultSpec(
            "oom",
            "CUDA out of memory when KV token usage reaches `usage`: OOM traceback, then SIGKILL",
            {**_AFTER, "usage": 0.9},
        ),
        FaultSpec(
            "error_chunk",
            'a `rate` share of streamed requests end with an in-band data: {"error": ...} chunk (HTTP 200) '
            "after `tokens` tokens",
            {**_AFTER, "rate": 1.0, "tokens": 2.0},
        ),
        FaultSpec(
            "malformed_sse",
            "a `rate` share of streamed requests get a malformed SSE event (truncated JSON) after `tokens` "
            "tokens, then the stream continues",
            {**_AFTER, "rate": 1.0, "tokens": 2.0},
        ),
        FaultSpec(
            "http_503",
            "503 storm: a `rate` share of generation requests (native and OpenAI routes) are answered 503",
            {**_AFTER, "rate": 1.0},
        ),
        FaultSpec(
            "metrics_disabled",
            "/metrics answers 404 as if the server ran without --enable-metrics",
            dict(_AFTER),
        ),
        FaultSpec(
            "nan_sanitized",
            "SGLANG_SANITIZE_NAN_LOGITS (0.5.14 on): log 'NaN detected in ...; values were sanitized' once; "
            "serving goes on",
            dict(_AFTER),
        ),
    )
}
_ALIASES: Final = {
    "503_storm": "http_503",
    "storm_503": "http_503",
    "nan": "garbage",
    "no_metrics": "metrics_disabled",
}


@dataclass(slots=True)
class Fault:
    name: str
    params: dict[str, float | str]
    # time.monotonic() at which the fault takes effect (None until armed)
    active_from: float | None = None
    armed_at_unix: float | None = None
    # time.monotonic() of arming: with armed_at_unix, converts active_from to a Unix time
    armed_at_mono: float = 0.0
    _counter: int = 0
    _hits: int = 0

    def num(self, key: str) -> float:
        value = self.params[key]
        assert isinstance(value, float)
        return value

    def text(self, key: str) -> str:
        return str(self.params[key])

    def is_active(self, now: float) -> bool:
        return self.active_from is not None and now >= self.active_from

    def pick(self) -> bool:
        """Deterministic rate sampling: of every N calls, round(N * rate) are picked, evenly spread."""
        rate = self.num("rate") if "rate" in self.params else 1.0
        n = self._counter
        self._counter = n + 1
        hit = math.floor((n + 1) * rate) > math.floor(n * rate)
        if hit:
            self._hits += 1
        return hit

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": dict(self.params),
            "active": self.is_active(now),
            "armed_at": self.armed_at_unix,
            "active_from": None
            if self.active_from is None or self.armed_at_unix is None
            else self.armed_at_unix + (self.active_from - self.armed_at_mono),
            "hits": self._hits,
        }


def _coerce(name: str, key: str, default: float | str, raw: object) -> float | str:
    if isinstance(default, float):
        try:
            value = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise FaultError(f"fault {name}: parameter {key}={raw!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise FaultError(f"fault {name}: parameter {key}={raw!r} must be a finite number >= 0")
        if key == "rate" and value > 1:
            raise FaultError(f"fault {name}: rate={raw!r} must be between 0 and 1")
        return value
    return str(raw)


def make_fault(name: str, params: dict[str, object] | None = None) -> Fault:
    canonical = _ALIASES.get(name, name)
    spec = FAULTS.get(canonical)
    if spec is None:
        known = ", ".join(sorted(FAULTS))
        raise FaultError(f"unknown fault {name!r} (known: {known})")
    values: dict[str, float | str] = dict(spec.params)
    for key, raw in (params or {}).items():
        if key not in spec.params:
            allowed = ", ".join(spec.params) or "none"
            raise FaultError(f"fault {canonical}: unknown parameter {key!r} (allowed: {allowed})")
        values[key] = _coerce(canonical, key, spec.params[key], raw)
    if canonical == "garbage" and values["style"] not in ("bang", "nan", "random"):
        raise FaultError(f"fault garbage: style={values['style']!r} must be bang, nan or random")
    if canonical == "crash" and values["phase"] not in ("serving", "startup"):
        raise FaultError(f"fault crash: phase={values['phase']!r} must be serving or startup")
    if canonical == "crash":
        _check_crash_text(str(values["text"]), str(values["phase"]))
    return Fault(canonical, values)


def parse_fault_spec(text: str) -> Fault:
    """Parse ``NAME[:key=value,...]``."""
    name, _, rest = text.strip().partition(":")
    params: dict[str, object] = {}
    if rest:
        for item in rest.split(","):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise FaultError(f"fault spec {text!r}: expected key=value, got {item!r}")
            params[key.strip()] = value.strip()
    return make_fault(name.strip(), params)


class FaultSet:
    """The faults armed in one server, by name (one of each)."""

    def __init__(self) -> None:
        self._faults: dict[str, Fault] = {}

    def arm(self, fault: Fault, *, now: float, delay_s: float) -> Fault:
        fault.active_from = now + delay_s
        fault.armed_at_unix = time.time()
        fault.armed_at_mono = now
        self._faults[fault.name] = fault
        return fault

    def add_pending(self, fault: Fault) -> None:
        """Register a start-up fault that is armed later (at ready)."""
        self._faults[fault.name] = fault

    def clear(self, name: str | None = None) -> list[str]:
        if name is None:
            names = list(self._faults)
            self._faults.clear()
            return names
        canonical = _ALIASES.get(name, name)
        return [canonical] if self._faults.pop(canonical, None) is not None else []

    def get(self, name: str) -> Fault | None:
        return self._faults.get(name)

    def active(self, name: str, now: float) -> Fault | None:
        fault = self._faults.get(name)
        if fault is not None and fault.is_active(now):
            return fault
        return None

    def all(self) -> list[Fault]:
        return list(self._faults.values())


def _check_crash_text(text: str, phase: str) -> None:
    from sglang_sentinel_sim.crash import CRASH_TEXTS

    if text not in CRASH_TEXTS:
        raise FaultError(f"fault crash: text={text!r} must be one of {', '.join(CRASH_TEXTS)}")
    if text == "died_init" and phase != "startup":
        raise FaultError("fault crash: text=died_init needs phase=startup (a scheduler dies while loading)")
    if phase == "startup" and text not in ("sampler", "died_init"):
        raise FaultError(f"fault crash: text={text!r} is a serving crash (phase=startup takes died_init)")


def check_fault_version(fault: Fault, version: str) -> None:
    """Faults whose text only releases from some row on print (``versions.BEHAVIOURS``); raises
    :class:`FaultError` for an older release."""
    from sglang_sentinel_sim.versions import BEHAVIOURS, has

    if fault.name == "nan_sanitized" and not has("log.nan_sanitized", version):
        first = BEHAVIOURS["log.nan_sanitized"].first
        raise FaultError(
            f"fault nan_sanitized: SGLang {version} has no SGLANG_SANITIZE_NAN_LOGITS (from {first})"
        )
    subprocess = fault.name == "crash" and fault.text("text") == "subprocess"
    if subprocess and not has("crash.subprocess_watchdog", version):
        first = BEHAVIOURS["crash.subprocess_watchdog"].first
        raise FaultError(
            f"fault crash: text=subprocess is the subprocess watchdog of SGLang {first} and later "
            f"(not in {version})"
        )
