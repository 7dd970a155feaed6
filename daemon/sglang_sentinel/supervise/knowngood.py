"""Launch configurations that answered right on this host, kept in the state directory.

A configuration is *known good* once one life of it answered every canary right for
``[server.fallback] good_after`` seconds (supervise/fallback.py decides when); the record keeps
what it was (the argv hash, its launch flags with secrets masked, the SGLang version the server
reported, the driver and GPU model, the launch profile and the model it served) and when it was
good (first and last). The fallback reads them back: a record is a candidate only for a launch of
the same SGLang version, the same launch profile (name) and the same model (``--model-path`` and
``--served-model-name``, as the flags give them); among those, one recorded on this GPU model and
driver comes first. A record's flags replace the configured ones, so a record of another profile
or model would make the fallback serve something else than configured: never a candidate. A
record written before the profile and model were kept reads its model from its flags; one without
a profile is not a candidate (which launch it was is not known).

The file (``known-good.json``) is rewritten atomically; one that cannot be read or parsed is
logged and counted (``sentinel_server_known_good_unreadable_total``) and set aside as
``known-good.json.bad``, never a crash: the records start again from nothing.

Flags are (flag, values) pairs in argv order: ``--tp-size 8`` is ``("--tp-size", ("8",))``, a
switch has no values, ``--a=b`` is ``("--a", ("b",))``. Everything before the first flag (the
interpreter, the entrypoint) is not a launch flag: a fallback keeps the current one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.log import get_logger

__all__ = [
    "ENDPOINT_FLAGS",
    "KNOWN_GOOD_FILE",
    "Flags",
    "KnownGood",
    "KnownGoodStore",
    "ModelId",
    "diff_flags",
    "join_argv",
    "model_of",
    "split_argv",
]

_log = get_logger(__name__)

KNOWN_GOOD_FILE = "known-good.json"
_MAX_RECORDS = 50  # oldest last-good dropped first; a host has a handful in practice
_MAX_BYTES = 4 * 2**20

Flags = tuple[tuple[str, tuple[str, ...]], ...]

# Where the server listens and its keys: always the current command's, never a record's.
ENDPOINT_FLAGS = frozenset({"--host", "--port", "--api-key", "--admin-api-key"})
# Which model a launch serves: (model path, served model name), None where the flag is absent
# (SGLang then serves the model path under its own name; the simulator its profile's model).
ModelId = tuple[str | None, str | None]
# SGLang's spellings (sglang/srt/server_args.py of 0.5.9 and 0.5.23: "--model-path", alias "--model").
_MODEL_PATH_FLAGS = ("--model-path", "--model")
_SERVED_NAME_FLAG = "--served-model-name"


def split_argv(argv: Sequence[str]) -> tuple[tuple[str, ...], Flags]:
    """(what precedes the first flag, the flags). A value is every token up to the next flag."""
    prefix: list[str] = []
    flags: list[tuple[str, list[str]]] = []
    for tok in argv:
        if tok.startswith("--") and len(tok) > 2:
            name, eq, value = tok.partition("=")
            flags.append((name, [value] if eq else []))
        elif flags:
            flags[-1][1].append(tok)
        else:
            prefix.append(tok)
    return tuple(prefix), tuple((name, tuple(values)) for name, values in flags)


def model_of(flags: Flags) -> ModelId:
    """The model a launch with these flags serves (the last value of each flag, as argparse)."""
    path: str | None = None
    name: str | None = None
    for flag, values in flags:
        if flag in _MODEL_PATH_FLAGS:
            path = " ".join(values)
        elif flag == _SERVED_NAME_FLAG:
            name = " ".join(values)
    return path, name


def join_argv(prefix: Iterable[str], flags: Flags) -> tuple[str, ...]:
    out = list(prefix)
    for name, values in flags:
        out.append(name)
        out.extend(values)
    return tuple(out)


def _show(values: tuple[str, ...]) -> str:
    return " ".join(values) if values else "(on)"


def diff_flags(old: Flags, new: Flags) -> list[str]:
    """What changes from ``old`` to ``new``, one line per flag, for logs and screens."""
    a: dict[str, tuple[str, ...]] = {}
    for name, values in old:
        a[name] = (*a.get(name, ()), *values) if name in a else values
    b: dict[str, tuple[str, ...]] = {}
    for name, values in new:
        b[name] = (*b.get(name, ()), *values) if name in b else values
    lines = []
    for name in [*a, *(n for n in b if n not in a)]:
        if name in ENDPOINT_FLAGS:
            continue
        if name not in b:
            lines.append(f"{name} {_show(a[name])} → removed")
        elif name not in a:
            lines.append(f"{name} added: {_show(b[name])}")
        elif a[name] != b[name]:
            lines.append(f"{name} {_show(a[name])} → {_show(b[name])}")
    return lines


@dataclass(frozen=True, slots=True)
class KnownGood:
    argv_hash: str  # LaunchCommand.config_hash of the life that was good
    flags: Flags  # its launch flags, secrets masked
    argv: tuple[str, ...]  # its whole argv, secrets masked (for screens)
    sglang_version: str | None  # as the server reported it (else the launch command's)
    driver_version: str | None
    gpu_model: str | None
    first_good: float  # wall clock
    last_good: float
    profile: str = ""  # the launch profile's name ("" in a record from before it was kept)
    model_path: str | None = None  # model_of(flags): what the launch served
    served_model_name: str | None = None

    @property
    def model(self) -> ModelId:
        return self.model_path, self.served_model_name

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = [[name, list(values)] for name, values in self.flags]
        data["argv"] = list(self.argv)
        return data

    @classmethod
    def from_json(cls, data: Any) -> KnownGood:
        """Raises ValueError/TypeError/KeyError for a malformed record."""
        if not isinstance(data, dict):
            raise ValueError("a record is not an object")
        flags = tuple((str(name), tuple(str(v) for v in values)) for name, values in data["flags"])
        opt = {
            k: (None if data.get(k) is None else str(data[k]))
            for k in ("sglang_version", "driver_version", "gpu_model")
        }
        # A record from before the model was kept: its flags say which model it served.
        path, name = model_of(flags)
        if "model_path" in data or "served_model_name" in data:
            path, name = (
                None if data.get(k) is None else str(data[k]) for k in ("model_path", "served_model_name")
            )
        return cls(
            argv_hash=str(data["argv_hash"]),
            flags=flags,
            argv=tuple(str(a) for a in data["argv"]),
            first_good=float(data["first_good"]),
            last_good=float(data["last_good"]),
            profile=str(data.get("profile", "")),
            model_path=path,
            served_model_name=name,
            **opt,
        )


class KnownGoodStore:
    """The records of one state directory; ``path`` None keeps them in memory only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.records: dict[str, KnownGood] = {}
        self.unreadable = 0  # files (or records) set aside since start

    def load(self, *, set_aside: bool = True) -> None:
        """Read the file (``set_aside`` False: a bad one is only logged, e.g. by ``sentinel check``)."""
        path = self.path
        if path is None:
            return
        try:
            if path.stat().st_size > _MAX_BYTES:
                raise ValueError(f"larger than {_MAX_BYTES} bytes")
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("records"), list):
                raise ValueError("no 'records' list")
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            if set_aside:
                self._set_aside(path, str(exc))
            else:
                self.unreadable += 1
                _log.warning("known_good_file_unreadable", path=str(path), error=str(exc), moved_to=None)
            return
        for item in data["records"]:
            try:
                rec = KnownGood.from_json(item)
            except (ValueError, TypeError, KeyError) as exc:
                self.unreadable += 1
                _log.warning(
                    "known_good_record_malformed", path=str(path), error=f"{type(exc).__name__}: {exc}"
                )
                continue
            self.records[rec.argv_hash] = rec
        _log.info("known_good_loaded", path=str(path), records=len(self.records))

    def _set_aside(self, path: Path, why: str) -> None:
        self.unreadable += 1
        bad = path.with_name(path.name + ".bad")
        try:
            os.replace(path, bad)
        except OSError:
            bad = path
        _log.warning("known_good_file_unreadable", path=str(path), error=why, moved_to=str(bad))

    def mark_good(
        self,
        argv_hash: str,
        argv: Sequence[str],
        *,
        sglang_version: str | None,
        driver_version: str | None,
        gpu_model: str | None,
        profile: str,
        now: float | None = None,
    ) -> KnownGood:
        """Record (or refresh the last-good time of) a configuration; saved at once."""
        now = time.time() if now is None else now
        old = self.records.get(argv_hash)
        flags = split_argv(argv)[1]
        path, name = model_of(flags)
        rec = KnownGood(
            argv_hash=argv_hash,
            flags=flags,
            argv=tuple(argv),
            sglang_version=sglang_version,
            driver_version=driver_version or (old.driver_version if old else None),
            gpu_model=gpu_model or (old.gpu_model if old else None),
            first_good=old.first_good if old is not None else now,
            last_good=now,
            profile=profile,
            model_path=path,
            served_model_name=name,
        )
        self.records[argv_hash] = rec
        if old is None:
            _log.info(
                "known_good_recorded", argv_hash=argv_hash, sglang_version=sglang_version, gpu_model=gpu_model
            )
        if len(self.records) > _MAX_RECORDS:
            oldest = min(self.records.values(), key=lambda r: r.last_good)
            del self.records[oldest.argv_hash]
        self.save()
        return rec

    def candidates(
        self,
        sglang_version: str | None,
        exclude: Iterable[str],
        *,
        profile: str,
        model: ModelId,
        gpu_model: str | None = None,
        driver_version: str | None = None,
    ) -> list[KnownGood]:
        """Records of this SGLang version, launch profile and model other than ``exclude``: those of
        this GPU model first, then of this driver, then the most recently good."""
        skip = set(exclude)
        found = [
            r
            for r in self.records.values()
            if r.argv_hash not in skip
            and sglang_version is not None
            and r.sglang_version == sglang_version
            and profile
            and r.profile == profile
            and r.model == model
        ]

        def rank(r: KnownGood) -> tuple[bool, bool, float]:
            return (
                gpu_model is not None and r.gpu_model == gpu_model,
                driver_version is not None and r.driver_version == driver_version,
                r.last_good,
            )

        return sorted(found, key=rank, reverse=True)

    def count_of(self, profile: str, model: ModelId) -> int:
        """Records of this launch profile and model, whatever their SGLang version (for screens)."""
        return sum(1 for r in self.records.values() if profile and r.profile == profile and r.model == model)

    def save(self) -> None:
        path = self.path
        if path is None:
            return
        doc = {"records": [r.as_json() for r in self.records.values()]}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, json.dumps(doc, indent=1).encode())
        except OSError as exc:
            _log.warning("known_good_save_failed", path=str(path), error=str(exc))
