"""Launch profiles and the argv they render to: SGLang's (per version) or a plain command.

The command line is always an argv list (never a shell string): no quoting bugs, no injection
through a model path or an extra argument. Placeholders of a command profile are replaced inside
single arguments; a value never becomes more than one argument.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field

from pydantic import ValidationError

from sglang_sentinel.sglang.launch_facts import DsaRow, glm5_choice, launch_facts
from sglang_sentinel.sglang.versions import NEWEST_KNOWN, Version, parse_version
from sglang_sentinel.supervise.settings import LaunchProfile, ServerSettings

__all__ = [
    "BUILTIN_PROFILES",
    "LaunchCommand",
    "ProfileError",
    "api_key_of",
    "config_hash_of",
    "detect_sglang_version",
    "dsa_choice",
    "launch_version",
    "python_of",
    "render_command",
    "resolve_profile",
    "unit_command",
    "version_text",
]

# The flagship deployment: GLM-5-NVFP4 (744B MoE) with TP over 8 RTX PRO 6000 (SM120, PCIe).
# Flags follow the deployment's known launch line (docs/sglang-versions.md). The DSA backends and
# the KV-cache dtype are not fixed here: GLM5_NVFP4_TABLE (sglang/launch_facts.py) picks them per
# SGLang version on SM120 (trtllm + bf16 for the deployment's 0.5.9; tilelang + bf16 from 0.5.19,
# where trtllm-gen MLA is unsupported on SM120), and preflight checks the same table. A value set
# in [server.profiles.glm5-nvfp4-rtxpro6000] overrides the table (and preflight judges it).
_GLM5 = LaunchProfile(
    kind="sglang",
    model_path="/models/GLM-5-NVFP4",
    served_model_name="glm-5",
    trust_remote_code=True,
    tp_size=8,
    quantization="modelopt_fp4",
    launch_table="glm5-nvfp4",
    gpu_arch=120,
    mem_fraction_static=0.85,
    disable_cuda_graph=True,
    enable_metrics=True,
    reasoning_parser="glm45",
    tool_call_parser="glm47",
    # PCIe-only 8-GPU box: community settings for GLM-5 on SM120, as in the deployment's launch line.
    extra_args=("--disable-custom-all-reduce",),
    # SGLANG_ENABLE_JIT_DEEPGEMM is the switch both 0.5.9 and 0.5.23 read (sglang/srt/environ.py);
    # the SGLANG_ENABLE_DEEP_GEMM of some recipes is read by neither, so it is not set.
    env={
        "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
        "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_LEVEL": "SYS",
    },
)

# The simulator: an SGLang-compatible server (`sentinel sim`), one command profile among others.
_SIM = LaunchProfile(
    kind="command",
    command=("{python}", "-m", "sglang_sentinel_sim", "--host", "{host}", "--port", "{port}"),
    metrics_args=("--enable-metrics",),
    api_key_args=("--api-key", "{api_key}"),
    served_model_name="sim",
    needs_gpus=0,
    needs_weights=False,
)

BUILTIN_PROFILES: dict[str, LaunchProfile] = {"sim": _SIM, "glm5-nvfp4-rtxpro6000": _GLM5}

# Flag spellings, entrypoint and CUDA-graph flags per version come from launch_facts (the
# versions table, read from every release's wheel: --dsa-* from 0.5.13, --nsa-* aliases accepted
# through 0.5.19, rejected from 0.5.20; per-phase CUDA-graph flags from 0.5.14). When the version
# cannot be determined, render for the newest known one.
_ASSUMED_VERSION: Version = NEWEST_KNOWN


_SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key"})


class ProfileError(Exception):
    """A profile that cannot be rendered (unknown name, impossible combination)."""


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    profile_name: str
    profile: LaunchProfile
    argv: tuple[str, ...]
    # Variables added to (or overriding) the inherited environment.
    env: dict[str, str] = field(default_factory=dict)
    # The daemon's one version type (sglang/versions.py): .postN and pre-releases kept, so the
    # release row is the one versions.resolve names (0.5.10.post1 is its own row, 0.5.23rc0 is 0.5.22's).
    sglang_version: Version | None = None
    # Why the version is what it is ("pinned", "detected", "assumed: ...").
    version_source: str = ""
    # Where a command profile's api_key_args put the key (argv indices; e.g. --token={api_key}),
    # and the key, so that display masks it there.
    secret_args: tuple[int, ...] = ()
    secret: str = field(default="", repr=False)
    # The launch-table row that chose the DSA backends / KV dtype (None: the profile has no table).
    launch_row: DsaRow | None = None
    # (prefill, decode, KV dtype) as rendered; "" = not passed, SGLang picks. Preflight judges these.
    dsa: tuple[str, str, str] = ("", "", "")

    @property
    def config_hash(self) -> str:
        """Short stable hash of what would be launched; changes whenever argv or env change."""
        blob = json.dumps({"argv": self.argv, "env": sorted(self.env.items())}, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def redacted_argv(self) -> list[str]:
        """argv with secrets (the API key) replaced, for logs and screens."""
        out = list(self.argv)
        for i, arg in enumerate(out[:-1]):
            if arg in _SECRET_FLAGS:
                out[i + 1] = "***"
        if self.secret:
            for i in self.secret_args:
                out[i] = out[i].replace(self.secret, "***")
        return out

    def display(self) -> str:
        """The command line for humans (quoted like a shell would need, but never run by one)."""
        import shlex

        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join(self.redacted_argv())
        return f"{env} {cmd}" if env else cmd


def resolve_profile(settings: ServerSettings) -> tuple[str, LaunchProfile]:
    """The profile named by ``settings.profile``, with its ``base`` chain applied."""
    return settings.profile, _resolve(settings, settings.profile, ())


def _resolve(settings: ServerSettings, name: str, seen: tuple[str, ...]) -> LaunchProfile:
    if name in seen:
        raise ProfileError(f"launch profile {name!r} extends itself ({' -> '.join((*seen, name))})")
    configured = settings.profiles.get(name)
    if configured is None:
        if name in BUILTIN_PROFILES:
            return BUILTIN_PROFILES[name]
        known = sorted({*BUILTIN_PROFILES, *settings.profiles})
        where = f" (extended by {seen[-1]!r})" if seen else ""
        raise ProfileError(f"unknown launch profile {name!r}{where} (known: {', '.join(known)})")
    base_name = configured.base or (name if name in BUILTIN_PROFILES else "")
    if not base_name:
        return configured
    if base_name == name:
        if name not in BUILTIN_PROFILES:
            raise ProfileError(f"launch profile {name!r} extends itself")
        base = BUILTIN_PROFILES[name]  # [server.profiles.<built-in>] adjusts that built-in
    else:
        base = _resolve(settings, base_name, (*seen, name))
    # Only the fields written in the config override the base; the rest come from it.
    explicit = configured.model_dump(include=configured.model_fields_set - {"base"})
    try:
        return LaunchProfile.model_validate({**base.model_dump(exclude={"base"}), **explicit})
    except ValidationError as exc:  # valid alone, not on this base (e.g. sim_* on an SGLang base)
        why = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ProfileError(f"launch profile {name!r} on base {base_name!r}: {why}") from None


def config_hash_of(settings: ServerSettings, command: LaunchCommand | None) -> str:
    """The launch-config hash the supervisor reports: the command's in child mode; elsewhere sentinel
    does not choose the command line, so only what it watches (mode, unit, endpoint) counts."""
    if settings.mode == "child" and command is not None:
        return command.config_hash
    blob = f"{settings.mode}|{settings.systemd.unit}|{settings.host}:{settings.port}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def api_key_of(settings: ServerSettings, profile: LaunchProfile | None = None) -> str:
    """The server's API key: the profile's own, else ``[server] api_key``; "" for none."""
    if profile is not None and profile.api_key:
        return profile.api_key
    return settings.api_key


def python_of(profile: LaunchProfile) -> str:
    return profile.python or sys.executable


def detect_sglang_version(python: str, timeout: float = 60.0) -> tuple[Version | None, str]:
    """Ask ``python`` which SGLang it imports. Returns (version, message); never raises.

    Importing sglang pulls in torch, so this takes seconds: call it from a thread.
    """
    code = "import sglang, sys; sys.stdout.write(sglang.__version__)"
    try:
        proc = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        return None, f"interpreter {python} not found"
    except subprocess.TimeoutExpired:
        return None, f"importing sglang with {python} took more than {timeout:.0f} s"
    except OSError as exc:
        return None, f"cannot run {python}: {exc.strerror or exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"sglang is not importable by {python}: {last[:300]}"
    try:
        version = parse_version(proc.stdout)
    except ValueError:
        return None, f"sglang imported but reported an unparsable version {proc.stdout[:50]!r}"
    return version, f"sglang {version} importable by {python}"


def version_text(version: Version | None) -> str | None:
    """``version`` as text that parses back to the same release row (``.postN``, ``rc0`` kept)."""
    return str(version) if version is not None else None


# The simulator's own entry points (pyproject.toml: `python -m sglang_sentinel_sim`, `sentinel-sim`,
# `sentinel sim`); its --sglang-version says which SGLang it speaks (docs/sim.md).
_SIM_MODULE = "sglang_sentinel_sim"
_SIM_VERSION_FLAG = "--sglang-version"


def _runs_the_simulator(argv: tuple[str, ...]) -> bool:
    names = [a.rsplit("/", 1)[-1] for a in argv]
    return _SIM_MODULE in argv or "sentinel-sim" in names or ("sentinel" in names and "sim" in argv)


def launch_version(cmd: LaunchCommand) -> str | None:
    """The SGLang version a launch speaks, known before its server says so: the one its flags were
    rendered for (detected or pinned), else, for the simulator, its ``--sglang-version`` argument
    (the simulator reports exactly that at /server_info). None when unknown offline (another
    command, or the simulator on its default, which sentinel does not import)."""
    if cmd.sglang_version is not None:
        return version_text(cmd.sglang_version)
    if cmd.profile.kind != "command" or not _runs_the_simulator(cmd.argv):
        return None
    found: str | None = None
    for i, arg in enumerate(cmd.argv):
        if arg == _SIM_VERSION_FLAG and i + 1 < len(cmd.argv):
            found = cmd.argv[i + 1]
        elif arg.startswith(_SIM_VERSION_FLAG + "="):
            found = arg.partition("=")[2]
    return found or None


def unit_command(settings: ServerSettings, args: tuple[str, ...]) -> LaunchCommand:
    """The launch a systemd unit runs, as sentinel models it: the unit's name, then its launch
    flags (``args``: the ``[server.systemd] args_variable`` of its environment files). The unit
    owns the interpreter and the entrypoint (its ExecStart=): only the flags are sentinel's to read
    or, for a fallback, to choose. The profile is the configured one where it resolves (its launch
    table and GPU architecture name the table's known-good row), else an empty command profile."""
    unit = settings.systemd.unit
    try:
        _, profile = resolve_profile(settings)
    except ProfileError:
        profile = LaunchProfile(kind="command")
    return LaunchCommand(f"systemd:{unit}", profile, (unit, *args), {})


def dsa_choice(profile: LaunchProfile, version: Version | None) -> tuple[DsaRow | None, tuple[str, str, str]]:
    """The table row (if the profile has a table) and the (prefill, decode, KV dtype) to render:
    the profile's own values where set, the row's elsewhere."""
    row = glm5_choice(version_text(version), profile.gpu_arch) if profile.launch_table else None
    table = row.backends if row is not None else ("", "")
    kv = row.kv_cache_dtype if row is not None else ""
    return row, (
        profile.dsa_prefill_backend or table[0],
        profile.dsa_decode_backend or table[1],
        profile.kv_cache_dtype or kv,
    )


def _sglang_argv(
    profile: LaunchProfile, settings: ServerSettings, version: Version, dsa: tuple[str, str, str]
) -> list[str]:
    if not profile.model_path:
        raise ProfileError("profile has no model_path")
    facts = launch_facts(version_text(version), profile.gpu_arch)
    # 0.5.9: python -m sglang.launch_server; from 0.5.19 that warns and `sglang serve` is the
    # entrypoint, run here through the profile's interpreter (launch_facts.SGLANG_CLI_STUB).
    argv = [python_of(profile), *facts.entrypoint_args, "--model-path", profile.model_path]
    if profile.served_model_name:
        argv += ["--served-model-name", profile.served_model_name]
    if profile.trust_remote_code:
        argv.append("--trust-remote-code")
    argv += ["--tp-size", str(profile.tp_size)]
    if profile.quantization:
        argv += ["--quantization", profile.quantization]
    if profile.attention_backend:
        argv += ["--attention-backend", profile.attention_backend]
    prefix = facts.dsa_flag_prefix
    prefill, decode, kv = dsa
    if prefill:
        argv += [f"{prefix}-prefill-backend", prefill]
    if decode:
        argv += [f"{prefix}-decode-backend", decode]
    if kv:
        argv += ["--kv-cache-dtype", kv]
    if profile.mem_fraction_static is not None:
        argv += ["--mem-fraction-static", f"{profile.mem_fraction_static:g}"]
    if profile.disable_cuda_graph:
        # --disable-cuda-graph is deprecated from 0.5.14 (per-phase graph backends replace it).
        argv += facts.disable_cuda_graph_flags
    if profile.enable_metrics:
        argv.append("--enable-metrics")
    if profile.reasoning_parser:
        argv += ["--reasoning-parser", profile.reasoning_parser]
    if profile.tool_call_parser:
        argv += ["--tool-call-parser", profile.tool_call_parser]
    api_key = api_key_of(settings, profile)
    if api_key:
        argv += ["--api-key", api_key]
    argv += ["--host", settings.host, "--port", str(settings.port)]
    return argv


def _fill(template: tuple[str, ...], values: dict[str, str], field_name: str) -> list[str]:
    out = []
    for arg in template:
        try:
            out.append(arg.format_map(values))
        except (KeyError, ValueError, IndexError) as exc:
            known = ", ".join("{" + k + "}" for k in values)
            raise ProfileError(
                f"{field_name}: cannot fill {arg!r} ({type(exc).__name__}: {exc}); placeholders: {known}"
                " (write {{ and }} for literal braces)"
            ) from None
    return out


def _deprecated_sim_args(profile: LaunchProfile) -> list[str]:
    """``sim_profile`` / ``sim_speed`` / ``sim_faults`` as the simulator's own arguments."""
    argv: list[str] = []
    if profile.sim_profile:
        argv += ["--profile", profile.sim_profile]
    if profile.sim_speed is not None:
        argv += ["--speed", f"{profile.sim_speed:g}"]
    for spec in profile.sim_faults:
        argv += ["--fault", spec]
    return argv


def _command_argv(profile: LaunchProfile, settings: ServerSettings) -> tuple[list[str], tuple[int, ...]]:
    """The argv, and the indices of the arguments that carry the API key."""
    if not profile.command:
        raise ProfileError('a kind = "command" profile needs a command (an argv template)')
    values = {"python": python_of(profile), "host": settings.host, "port": str(settings.port)}
    argv = _fill(profile.command, values, "command")
    argv += _deprecated_sim_args(profile)
    if profile.enable_metrics:
        argv += _fill(profile.metrics_args, values, "metrics_args")
    api_key = api_key_of(settings, profile)
    secret_at: tuple[int, ...] = ()
    if api_key:
        secret_at = tuple(len(argv) + i for i, t in enumerate(profile.api_key_args) if "{api_key}" in t)
        argv += _fill(profile.api_key_args, {**values, "api_key": api_key}, "api_key_args")
    return argv, secret_at


def render_command(
    settings: ServerSettings,
    *,
    detected_version: Version | None = None,
    detect_message: str = "",
) -> LaunchCommand:
    """Render the launch command for ``settings.profile``.

    The SGLang version comes from the profile's pin, else ``detected_version`` (the caller ran
    :func:`detect_sglang_version`), else the newest known behaviour is assumed.
    """
    name, profile = resolve_profile(settings)
    if profile.kind == "command":
        argv, secret_at = _command_argv(profile, settings)
        return LaunchCommand(
            name,
            profile,
            (*argv, *profile.extra_args),
            dict(profile.env),
            secret_args=secret_at,
            secret=api_key_of(settings, profile),
        )
    if profile.sim_fields_set():
        raise ProfileError(
            f"profile {name!r}: {', '.join(profile.sim_fields_set())} only apply to a command profile "
            "(the simulator), not to one rendered by SGLang"
        )
    version: Version | None
    if profile.sglang_version:
        try:
            version = parse_version(profile.sglang_version)
        except ValueError:
            raise ProfileError(f"sglang_version {profile.sglang_version!r} is not a version number") from None
        source = "pinned in the profile"
    elif detected_version is not None:
        version, source = detected_version, "detected"
    else:
        version = None
        source = f"unknown ({detect_message or 'not detected'}); flags rendered for {_ASSUMED_VERSION}"
    row, dsa = dsa_choice(profile, version)
    argv = _sglang_argv(profile, settings, version or _ASSUMED_VERSION, dsa)
    return LaunchCommand(
        name,
        profile,
        (*argv, *profile.extra_args),
        dict(profile.env),
        version,
        source,
        launch_row=row,
        dsa=dsa,
    )
