"""Checks run before every start: is there any chance this launch works?

Each check returns a :class:`PreflightResult`; a ``fail`` blocks the launch (the supervisor
counts it as a failed start and backs off), a ``warn`` is logged and shown by ``sentinel check``.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sglang_sentinel.sglang.launch_facts import dsa_verdicts, normalize_kv_dtype
from sglang_sentinel.sglang.versions import OLDEST_KNOWN, Version, check_supported
from sglang_sentinel.supervise.launch import (
    LaunchCommand,
    detect_sglang_version,
    python_of,
    version_text,
)
from sglang_sentinel.supervise.settings import ServerSettings

__all__ = [
    "GpuInfo",
    "GpuReader",
    "PreflightResult",
    "check_gpus",
    "check_known_bad",
    "check_model_path",
    "check_port",
    "check_sglang_supported",
    "read_gpus_nvml",
    "run_preflight",
]

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True, slots=True)
class PreflightResult:
    name: str
    status: Status
    message: str
    # Restart reason when this failure blocks a start (port_in_use is its own crash cause).
    reason: str = "preflight"
    # A failure that usually clears by itself within seconds (GPU memory of a dead server).
    transient: bool = False


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    memory_total_bytes: int
    memory_free_bytes: int
    compute_capability: tuple[int, int] | None


# Returns the GPUs, or raises any exception with a human-readable message.
GpuReader = Callable[[], Sequence[GpuInfo]]


def read_gpus_nvml() -> list[GpuInfo]:
    """The GPUs as NVML sees them right now. Blocking: call from a thread."""
    import pynvml

    pynvml.nvmlInit()
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                cc: tuple[int, int] | None = (int(major), int(minor))
            except pynvml.NVMLError:
                cc = None
            gpus.append(
                GpuInfo(
                    i,
                    name.decode() if isinstance(name, bytes) else str(name),
                    int(mem.total),
                    int(mem.free),
                    cc,
                )
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def check_gpus(cmd: LaunchCommand, reader: GpuReader) -> tuple[PreflightResult, list[GpuInfo]]:
    need = cmd.profile.required_gpus
    try:
        gpus = list(reader())
    except Exception as exc:
        if need == 0:
            return PreflightResult("gpus", "skip", f"profile needs no GPU (NVML: {exc})"), []
        return PreflightResult("gpus", "fail", f"profile needs {need} GPU(s) but NVML failed: {exc}"), []
    if need == 0:
        return PreflightResult("gpus", "ok", f"profile needs no GPU ({len(gpus)} present)"), gpus
    if len(gpus) < need:
        return PreflightResult("gpus", "fail", f"profile needs {need} GPU(s), {len(gpus)} present"), gpus
    fraction = cmd.profile.mem_fraction_static
    used = gpus[:need]
    if fraction is not None:
        # SGLang sizes weights + KV pool as this fraction of TOTAL memory and needs it free at start;
        # memory still held by a previous (dying) server is the usual cause of a start-up OOM.
        short = [g for g in used if g.memory_free_bytes < fraction * g.memory_total_bytes]
        if short:
            detail = ", ".join(
                f"GPU{g.index} {g.memory_free_bytes / 2**30:.1f}/{g.memory_total_bytes / 2**30:.1f} GiB free"
                for g in short
            )
            message = f"mem_fraction_static {fraction:g} needs more free memory: {detail}"
            return PreflightResult("gpus", "fail", message, transient=True), gpus
    free = min(g.memory_free_bytes for g in used) / 2**30
    return PreflightResult(
        "gpus", "ok", f"{len(gpus)} GPU(s), min free {free:.1f} GiB on the {need} used"
    ), gpus


def check_port(host: str, port: int) -> PreflightResult:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # Same option uvicorn uses: a port in TIME_WAIT from the previous run is free for it.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return PreflightResult("port", "fail", f"{host}:{port} is already in use", "port_in_use")
        return PreflightResult("port", "fail", f"cannot bind {host}:{port}: {exc.strerror or exc}")
    return PreflightResult("port", "ok", f"{host}:{port} is free")


def check_model_path(cmd: LaunchCommand) -> PreflightResult:
    if not cmd.profile.requires_weights:
        return PreflightResult("model_path", "skip", "profile needs no weights")
    raw = cmd.profile.model_path
    looks_local = raw.startswith(("/", ".", "~"))
    path = Path(raw).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return PreflightResult("model_path", "ok", f"{path} has config.json")
        return PreflightResult("model_path", "fail", f"{path} has no config.json")
    if looks_local:
        return PreflightResult("model_path", "fail", f"{path} does not exist or is not a directory")
    return PreflightResult(
        "model_path", "warn", f"{raw!r} is not a local directory; SGLang will try to download it"
    )


def check_known_bad(cmd: LaunchCommand, gpus: Sequence[GpuInfo]) -> list[PreflightResult]:
    """Combinations known to fail on the GPUs' architecture for the SGLang version rendered for.

    DSA backends and KV dtype are judged against the same table the profile renders from
    (``sglang.launch_facts.GLM5_NVFP4_TABLE``), with SGLang's own defaults filled in where the
    launch leaves a choice to SGLang: the rendered table row is never warned about, an override
    that hits a known-bad row is.
    """
    p = cmd.profile
    if p.kind != "sglang":
        return []  # the combinations below are SGLang launch flags
    archs = {g.compute_capability for g in gpus[: p.required_gpus] if g.compute_capability}
    if not archs:
        return [PreflightResult("known_bad", "skip", "GPU architecture unknown")]
    version = version_text(cmd.sglang_version)
    found: list[PreflightResult] = []
    row = cmd.launch_row
    arch_values = sorted(major * 10 + minor for major, minor in archs)
    if row is not None and p.gpu_arch and any(a // 10 != p.gpu_arch // 10 for a in arch_values):
        found.append(
            PreflightResult(
                "known_bad",
                "warn",
                f"profile renders for SM{p.gpu_arch} ({row.key}) but the GPUs are "
                + ", ".join(f"SM{a}" for a in arch_values)
                + "; set gpu_arch in the profile",
            )
        )
    if row is not None and row.verdict == "no_known_good" and row.sm_major:
        found.append(
            PreflightResult(
                "known_bad", "warn", f"{row.key} (SGLang {row.versions}): {row.what} [{row.source}]"
            )
        )
    uses_dsa = row is not None or any(cmd.dsa[:2])
    if uses_dsa:
        filled = not all(cmd.dsa[:2]) or not normalize_kv_dtype(cmd.dsa[2])
        seen: set[str] = set()
        for arch in arch_values:
            verdicts = dsa_verdicts(version, arch, *cmd.dsa, glm=row is not None)
            for bad in verdicts.bad:
                if bad.key in seen:
                    continue
                seen.add(bad.key)
                prefill, decode, kv = verdicts.effective
                found.append(
                    PreflightResult(
                        "known_bad",
                        "warn",
                        f"{bad.key} (SGLang {bad.versions}, SM{arch}): {bad.what}; this launch: "
                        f"prefill {prefill}, decode {decode}, KV {kv}"
                        f"{' (SGLang defaults filled in)' if filled else ''} [{bad.source}]",
                    )
                )
    if (
        p.quantization == "modelopt_fp4"
        and "--fp4-gemm-backend" not in p.extra_args
        and any(cc[0] >= 10 for cc in archs)
    ):
        found.append(
            PreflightResult(
                "known_bad",
                "warn",
                "FP4 GEMM default backend flashinfer_cutlass had a NaN race ('probability tensor contains "
                "inf/nan', flashinfer-ai/flashinfer#2708, fixed by flashinfer-ai/flashinfer#2716); "
                "the canaries watch for it",
            )
        )
    if not found:
        names = ", ".join(f"SM{major}{minor}" for major, minor in sorted(archs))
        found.append(PreflightResult("known_bad", "ok", f"no known-bad combination for {names}"))
    return found


def check_sglang_supported(version: Version, mode: str) -> PreflightResult | None:
    """The installed SGLang against the oldest release read, by the check a pinned
    ``sglang_version`` gets (``versions.check_supported``); None when supported.

    A launch with sentinel's flags (child mode, or the unit in systemd mode) fails: they are
    rendered for the oldest release read, which that older parser may not accept (argparse exit 2,
    a crash loop). In external mode sentinel launches nothing and can still watch the server: a
    warning (the status line says the same from the version the server reports). Only a detected
    version is judged: the supervisor detects in child mode, ``sentinel check`` in every mode.
    """
    try:
        check_supported(str(version))
    except ValueError as exc:
        if mode == "external":
            return PreflightResult(
                "sglang_version", "warn", f"{exc}; watched with {OLDEST_KNOWN}'s behaviour (not launched)"
            )
        return PreflightResult(
            "sglang_version",
            "fail",
            f"{exc}; the launch would pass flags rendered for {OLDEST_KNOWN}, which its argument "
            "parser may not accept",
        )
    return None


async def run_preflight(
    cmd: LaunchCommand,
    settings: ServerSettings,
    *,
    gpu_reader: GpuReader | None = None,
    check_port_free: bool = True,
    detected: tuple[Version | None, str] | None = None,
) -> list[PreflightResult]:
    """All checks for one launch. Never raises; blocking parts run in threads."""
    results: list[PreflightResult] = []
    reader = gpu_reader or read_gpus_nvml
    gpu_result, gpus = await asyncio.to_thread(check_gpus, cmd, reader)
    results.append(gpu_result)
    if check_port_free:
        results.append(check_port(settings.host, settings.port))
    results.append(check_model_path(cmd))
    if cmd.profile.kind == "sglang":
        if detected is None:
            detected = await asyncio.to_thread(detect_sglang_version, python_of(cmd.profile))
        version, message = detected
        status: Status = "ok" if version else "fail"
        pinned = cmd.profile.sglang_version
        if version and pinned and cmd.sglang_version not in (None, version):
            # Flags, entrypoint and the launch-table row follow the pin, not what will run.
            status = "warn"
            message += f"; flags are rendered for the pinned sglang_version {pinned}"
        results.append(PreflightResult("sglang", status, message))
        unsupported = check_sglang_supported(version, settings.mode) if version else None
        if unsupported is not None:
            results.append(unsupported)
    results.extend(check_known_bad(cmd, gpus))
    return results
