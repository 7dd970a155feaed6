"""Configuration of the supervised SGLang server (section ``[server]``).

Durations are seconds, sizes bytes, ratios 0..1. Defaults describe the embedded default
deployment: ``sentinel sim`` as a managed child on loopback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from sglang_sentinel.redact import register_secret
from sglang_sentinel.router.settings import RouterTargetSettings
from sglang_sentinel.section import Secret, Section
from sglang_sentinel.sglang.versions import check_supported

__all__ = [
    "CanarySettings",
    "CheckAction",
    "CheckSettings",
    "ChecksSettings",
    "FallbackSettings",
    "LaunchProfile",
    "RestartSettings",
    "ServerSettings",
    "StallSettings",
    "SystemdSettings",
]

CheckAction = Literal["alert", "restart"]


class CheckSettings(Section):
    enabled: bool = True
    interval: float = Field(default=15.0, gt=0)
    # Client timeout. /health waits up to 20 s (SGLANG_HEALTH_CHECK_TIMEOUT) before its own 503,
    # so anything shorter would turn a slow-but-answering server into a timeout.
    timeout: float = Field(default=30.0, gt=0)
    # alert: report only (series + log). restart: restart after `failures` consecutive failures.
    action: CheckAction = "restart"
    failures: int = Field(default=3, ge=1)
    # After a failure the next run comes this soon (None = `interval`): a 300 s canary confirms a
    # broken server in a minute or two instead of a quarter of an hour.
    retry_interval: float | None = Field(default=None, gt=0)


class StallSettings(CheckSettings):
    # The decode token counter must move at least once in this many seconds while requests are
    # running. Far below SGLang's own 300 s watchdog (which fires after 300-450 s).
    stall_after: float = Field(default=60.0, gt=0)
    failures: int = Field(default=1, ge=1)


class CanarySettings(Section):
    """One known-answer prompt, sent at temperature 0."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    prompt: str = Field(min_length=1)
    # A case-insensitive regular expression the answer must match.
    expect: str = Field(min_length=1)
    max_tokens: int = Field(default=128, ge=1, le=4096)

    @field_validator("expect")
    @classmethod
    def _compiles(cls, value: str) -> str:
        # Compiled at every canary run: a bad pattern would fail every run as a "wrong answer".
        try:
            re.compile(value, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


def _default_canaries() -> tuple[CanarySettings, ...]:
    return (
        CanarySettings(
            name="arithmetic",
            prompt="What is 2+2? Answer with the number only.",
            expect=r"\b4\b|\bfour\b",
            max_tokens=32,
        ),
        CanarySettings(
            name="is_prime",
            prompt="Write a Python function is_prime(n) that returns True if n is a prime number. "
            "Reply with the code only.",
            expect=r"def\s+is_prime\s*\(",
            max_tokens=256,
        ),
    )


class CanaryCheckSettings(CheckSettings):
    interval: float = Field(default=300.0, gt=0)
    timeout: float = Field(default=120.0, gt=0)
    retry_interval: float | None = Field(default=30.0, gt=0)
    # chat: /v1/chat/completions with thinking disabled (what users call); generate: native /generate.
    api: Literal["chat", "generate"] = "chat"
    # Model name sent with chat requests; SGLang echoes it and does not validate it.
    model: str = "default"
    canaries: tuple[CanarySettings, ...] = Field(default_factory=_default_canaries)
    # Garbage detector thresholds (applied to every canary answer).
    max_nonprintable_ratio: float = Field(default=0.1, ge=0, le=1)
    # An answer made of one token repeated at least this many times is garbage ("!!!!!!!!").
    max_repeats: int = Field(default=8, ge=2)

    @model_validator(mode="after")
    def _unique_names(self) -> CanaryCheckSettings:
        names = [c.name for c in self.canaries]
        if len(names) != len(set(names)):
            raise ValueError(f"canary names must be unique, got {names}")
        return self


class ChecksSettings(Section):
    health: CheckSettings = Field(default_factory=lambda: CheckSettings(interval=10.0))
    health_generate: CheckSettings = Field(default_factory=lambda: CheckSettings(interval=30.0, timeout=60.0))
    stall: StallSettings = Field(default_factory=StallSettings)
    canary: CanaryCheckSettings = Field(default_factory=CanaryCheckSettings)


class RestartSettings(Section):
    backoff_initial: float = Field(default=5.0, ge=0)
    backoff_max: float = Field(default=300.0, ge=0)
    backoff_multiplier: float = Field(default=2.0, ge=1)
    # Each delay is multiplied by a random factor in [1 - jitter, 1 + jitter].
    jitter: float = Field(default=0.2, ge=0, le=1)
    # More than `max_restarts` restarts within `window` seconds → failed state (crash loop).
    max_restarts: int = Field(default=5, ge=0)
    window: float = Field(default=3600.0, gt=0)
    # Ready for this long → the backoff starts from `backoff_initial` again.
    stable_after: float = Field(default=600.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> RestartSettings:
        if self.backoff_initial > self.backoff_max:
            raise ValueError(
                f"backoff_initial ({self.backoff_initial:g}) must not exceed "
                f"backoff_max ({self.backoff_max:g})"
            )
        return self


class FallbackSettings(Section):
    """``[server.fallback]``: relaunch with a configuration known to answer right (supervise/fallback.py)."""

    # Off by default: a different command line than the one configured is a decision an operator
    # opts into. Child mode (sentinel renders the argv) and systemd mode (sentinel writes the unit's
    # flags into [server.systemd] fallback_env); external mode refuses it (nothing to relaunch).
    enabled: bool = False
    # This many correctness failures (confirmed canary garbage, NaN-class crashes) of one
    # configuration within `window` seconds start the fallback.
    failures: int = Field(default=2, ge=1)
    window: float = Field(default=1800.0, gt=0)
    # A configuration is recorded known-good once it has answered every canary right for this
    # long in one life (and again, its last-good time, on every passing round after that).
    good_after: float = Field(default=600.0, ge=0)
    # Where a fallback may come from: this host's known-good records, the launch table's
    # known_good row for the running SGLang version and GPU architecture, or both.
    sources: tuple[Literal["history", "table"], ...] = ("history", "table")


class SystemdSettings(Section):
    unit: str = "sglang.service"
    # Command prefixes, injectable so tests (and unusual hosts: sudo, --user) can swap them.
    systemctl: tuple[str, ...] = ("systemctl",)
    # "{unit}" is replaced by the unit name. Only new lines matter: history would re-trigger
    # crash classification of old failures.
    journal: tuple[str, ...] = ("journalctl", "--follow", "--output=cat", "--lines=0", "--unit={unit}")
    # How often the unit's ActiveState is polled to notice an exit.
    poll_interval: float = Field(default=2.0, gt=0)
    # After an exit, wait this long for the journal's last lines (the crash cause) to arrive.
    settle: float = Field(default=2.0, ge=0)
    # The unit's launch flags (supervise/unitenv.py): the variable its ExecStart= expands, the
    # operator's environment file that sets it, and the optional one after it that sentinel writes
    # while a fallback is in force ([server.fallback]; deploy/sglang.service reads both, the later
    # wins). Read for the known-good records and the fallback; the defaults are deploy/'s paths.
    args_variable: str = Field(default="SGLANG_ARGS", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    launch_env: Path = Path("/etc/sglang/launch.env")
    fallback_env: Path = Path("/var/lib/sentinel/sglang-fallback.env")


class LaunchProfile(Section):
    """How to start the server in child mode (host and port come from ``[server]``).

    A profile is one of two kinds:

    - ``kind = "sglang"``: rendered by the SGLang renderer from the fields below
      (``python -m sglang.launch_server`` up to 0.5.18, ``sglang serve`` from 0.5.19, run by
      ``python``; flags following the SGLang version).
    - ``kind = "command"``: a plain argv template, ``command``, in which ``{python}``, ``{host}``
      and ``{port}`` are replaced (``{{``/``}}`` for literal braces); then ``metrics_args`` when
      ``enable_metrics``, ``api_key_args`` (with ``{api_key}``) when there is an API key, and
      ``extra_args``. The simulator is the built-in command profile ``sim``.

    What the launch needs is declared, not inferred from the kind: ``needs_gpus`` (how many GPUs
    must be present; default ``tp_size`` for sglang, 0 for a command) and ``needs_weights`` (whether
    ``model_path`` must be a local checkpoint; default true for sglang, false for a command).
    Preflight reads these.

    Deprecated, still accepted: ``kind = "sim"`` (= ``kind = "command"`` based on the built-in
    ``sim`` profile), ``gpus`` (= ``needs_gpus``), and ``sim_profile`` / ``sim_speed`` /
    ``sim_faults``, which render as the simulator's ``--profile``, ``--speed`` and ``--fault``
    arguments after ``command`` (the same as writing them in ``extra_args``). They are refused on a
    profile rendered by SGLang, whose launcher knows no such flags.
    """

    # Start from this profile (built-in or configured) and change only the fields given here.
    # A configured profile named like a built-in one extends it implicitly.
    base: str = ""
    kind: Literal["sglang", "command"] = "sglang"
    # Interpreter that runs the server ({python} of a command); empty = the one running sentinel.
    python: str = ""
    # command profiles: the argv template, and the arguments added when metrics / an API key apply.
    command: tuple[str, ...] = ()
    metrics_args: tuple[str, ...] = ()
    api_key_args: tuple[str, ...] = ()
    # Capabilities the preflight checks; None = the kind's default (see above).
    needs_gpus: int | None = Field(default=None, ge=0, validation_alias=AliasChoices("needs_gpus", "gpus"))
    needs_weights: bool | None = None
    # Pin the SGLang version used to render flags; empty = ask the interpreter.
    sglang_version: str = ""
    model_path: str = ""
    served_model_name: str = ""
    trust_remote_code: bool = False
    tp_size: int = Field(default=1, ge=1)
    quantization: str = ""
    attention_backend: str = ""
    # A launch table (sglang_sentinel.sglang.launch_facts) that picks the DSA backends and KV dtype left
    # empty here per SGLang version and GPU architecture: "glm5-nvfp4" (GLM5_NVFP4_TABLE) or "".
    launch_table: Literal["", "glm5-nvfp4"] = ""
    # Compute capability the table renders for (120 = SM120, RTX PRO 6000); preflight compares it
    # with the GPUs present. 0 = no target (the table's rows for any architecture).
    gpu_arch: int = Field(default=0, ge=0)
    # Rendered as --nsa-* or --dsa-* depending on the SGLang version.
    dsa_prefill_backend: str = ""
    dsa_decode_backend: str = ""
    kv_cache_dtype: str = ""
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    disable_cuda_graph: bool = False
    enable_metrics: bool = True
    reasoning_parser: str = ""
    tool_call_parser: str = ""
    api_key: Secret = ""
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("sglang_version")
    @classmethod
    def _supported_sglang(cls, v: str) -> str:
        # A pin below the oldest release read renders flags nobody checked: refuse it here (config
        # error naming the field) rather than start a server whose argparse may reject them.
        if v.strip():
            check_supported(v)  # pydantic names the field
        return v

    @model_validator(mode="after")
    def _register_key(self) -> LaunchProfile:
        register_secret(self.api_key)  # masked in every log line and copied server line from now on
        return self

    # Deprecated aliases of simulator arguments (see the class docstring).
    sim_profile: str = ""
    sim_speed: float | None = Field(default=None, gt=0)
    sim_faults: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _deprecated_sim_kind(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "sim":
            # The old kind named the simulator; now it is the built-in command profile "sim".
            data = {**data, "kind": "command"}
            data.setdefault("base", "sim")
        return data

    @model_validator(mode="after")
    def _sim_aliases_need_a_command(self) -> LaunchProfile:
        if "kind" in self.model_fields_set and self.kind == "sglang" and self.sim_fields_set():
            raise ValueError(
                f"{', '.join(self.sim_fields_set())} only apply to the simulator (a command profile), "
                'not to kind = "sglang"; use extra_args for SGLang flags'
            )
        return self

    def sim_fields_set(self) -> list[str]:
        """The deprecated simulator fields this profile sets."""
        return [
            name
            for name, unset in (
                ("sim_profile", not self.sim_profile),
                ("sim_speed", self.sim_speed is None),
                ("sim_faults", not self.sim_faults),
            )
            if not unset
        ]

    @property
    def required_gpus(self) -> int:
        if self.needs_gpus is not None:
            return self.needs_gpus
        return self.tp_size if self.kind == "sglang" else 0

    @property
    def requires_weights(self) -> bool:
        if self.needs_weights is not None:
            return self.needs_weights
        return self.kind == "sglang"


class ServerSettings(Section):
    # child: sentinel starts the server itself; systemd: the server is its own unit;
    # external: watch and report only.
    mode: Literal["child", "systemd", "external"] = "child"
    # What answers at host:port in external mode: an SGLang server, or SGLang's router (smg):
    # readiness from /readiness (its /health is 200 with no worker), canaries name the model
    # of /v1/models, the "router" collector reports the worker pool ([server.router]).
    # auto (the default in external mode): detected at start from the routes the target serves
    # (sglang_sentinel.router.detect), within [server.router] detect_timeout_seconds. Undecided
    # (the target did not answer in either shape in time) reads as "server", and says so:
    # sentinel_target_kind_undecided 1 and a line on the status page and in `sentinel status`.
    # A child or systemd server is always "server" (sentinel never launches a router).
    kind: Literal["server", "router", "auto"] = "auto"
    router: RouterTargetSettings = Field(default_factory=RouterTargetSettings)
    # Launch profile for child mode: a built-in name ("sim", "glm5-nvfp4-rtxpro6000") or a key of
    # `profiles`. "sim" is the embedded default: `sentinel sim` on loopback.
    profile: str = "sim"
    profiles: dict[str, LaunchProfile] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = Field(default=30000, ge=1, le=65535)
    # Bearer key for the probes (and passed to a child server). Empty = none. A plain str because
    # other packages (load, calibrate, daemon) read it as one.
    api_key: Secret = ""
    # A file holding the key instead (one line; read when the config is loaded: at start and on
    # SIGHUP). Preferred over api_key: a config file gets pasted into tickets, a key file does not.
    api_key_file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_key_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "api_key_file" not in data:
            return data
        if data["api_key_file"] in ("", None):
            return {**data, "api_key_file": None}  # "" = unset, as for api_key (not the cwd)
        path = Path(data["api_key_file"])
        if data.get("api_key"):
            raise ValueError("api_key and api_key_file are both set; keep one")
        try:
            key = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            raise ValueError(f"api_key_file {path}: {why}") from None
        if not key:
            raise ValueError(f"api_key_file {path}: empty")
        if "\n" in key or "\r" in key:
            raise ValueError(f"api_key_file {path}: the key spans several lines (one line expected)")
        return {**data, "api_key": key}

    @model_validator(mode="after")
    def _router_is_external(self) -> ServerSettings:
        if self.mode != "external" and "kind" not in self.model_fields_set:
            object.__setattr__(self, "kind", "server")  # the default "auto" means external targets only
        if self.kind in ("router", "auto") and self.mode != "external":
            raise ValueError(
                f'kind = "{self.kind}" needs mode = "external" (sentinel never launches a router)'
            )
        return self

    @model_validator(mode="after")
    def _register_key(self) -> ServerSettings:
        register_secret(self.api_key)  # masked in every log line and copied server line from now on
        return self

    # The child's stdout+stderr; empty = <state_dir>/server.log.
    log_file: Path | None = None
    log_max_bytes: int = Field(default=64 * 1024 * 1024, ge=4096)
    log_backups: int = Field(default=5, ge=0)
    # Lines kept in memory for crash classification.
    log_tail_lines: int = Field(default=400, ge=10)
    # A 744B model loads for many minutes before its port opens; 30 min is deliberately generous.
    start_timeout: float = Field(default=1800.0, gt=0)
    # How often /health is polled while starting.
    startup_poll_interval: float = Field(default=2.0, gt=0)
    # After a server dies the driver needs a moment to release its GPU memory: a preflight that
    # fails only for free memory is retried for this long before it counts as a failed start.
    gpu_release_wait: float = Field(default=60.0, ge=0)
    # SIGTERM → wait this long for the drain → SIGKILL the process group.
    stop_timeout: float = Field(default=60.0, gt=0)
    # Limit for each before-stop hook (stop synthetic load).
    before_stop_timeout: float = Field(default=30.0, gt=0)
    # In systemd mode, also stop the unit when sentinel stops (off: the server outlives sentinel).
    stop_unit_on_exit: bool = False
    restart: RestartSettings = Field(default_factory=RestartSettings)
    checks: ChecksSettings = Field(default_factory=ChecksSettings)
    systemd: SystemdSettings = Field(default_factory=SystemdSettings)
    fallback: FallbackSettings = Field(default_factory=FallbackSettings)

    @model_validator(mode="after")
    def _fallback_needs_a_launch(self) -> ServerSettings:
        if self.fallback.enabled and self.mode == "external":
            raise ValueError(
                'fallback.enabled needs mode = "child" or "systemd": in external mode sentinel does not '
                "start the server, so it cannot relaunch it with another command line"
            )
        return self
