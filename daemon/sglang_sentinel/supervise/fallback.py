"""When the configured launch answers wrong: relaunch with one known to answer right.

Restarting a configuration that answers garbage only gets garbage again until the crash-loop
limit parks it as ``failed``. What fixes it is another configuration, and sentinel knows which
ones answered right: its own records (supervise/knowngood.py) and the launch table's
``known_good`` row for the running SGLang version and GPU architecture.

Decision rules (``[server.fallback]``, child and systemd mode, opt-in):

- a *correctness failure* is a confirmed canary failure on its answer (supervise/garbage.py:
  ``wrong_answer`` / ``garbage_*`` ``checks.canary.failures`` times in a row) or a NaN-class crash
  (``nan_in_sampler``); ``failures`` of them within ``window`` seconds, of the configured launch,
  start a fallback;
- the fallback is a record of the same SGLang version (as the server reported it), the same
  launch profile and the same model (supervise/knowngood.py) whose flags differ, this GPU model's
  and driver's first, then the most recently good; else the table's ``known_good`` row (only the
  DSA backend flags and the KV-cache dtype change); the interpreter, entrypoint, host, port and
  keys are always the configured ones: a fallback changes launch flags only;
- once per incident: while the fallback runs there is no second fallback; a fallback that fails
  too goes the usual way (restarts, then ``failed``); ``sentinel reset --configured`` ends the
  incident and launches the configured command again;
- the decision is saved (``supervisor-fallback.json``, no secrets: flags only, with the SGLang
  version it was made for) and restored by a restarted sentinel, as long as the configured command
  is still the one it was about and SGLang is still that version: an edited configuration, or an
  SGLang upgrade that left the command line as it was, is tried as configured
  (``server_fallback_discarded``, ``sentinel_server_fallback_discarded_total{why}``). The version
  is compared as soon as it is known: at start from the launch (detected, pinned, the simulator's
  argument), else when the server reports it (the fallback's life then ends, the configured one
  starts).

In systemd mode the commands are the unit's flags (launch.unit_command, supervise/unitenv.py): the
supervisor writes a fallback's flags into the unit's fallback environment file and restarts the
unit; this module only decides.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.log import get_logger
from sglang_sentinel.sglang.launch_facts import glm5_choice, launch_facts
from sglang_sentinel.sglang.versions import parse_version
from sglang_sentinel.supervise.knowngood import (
    ENDPOINT_FLAGS,
    KNOWN_GOOD_FILE,
    Flags,
    KnownGoodStore,
    diff_flags,
    join_argv,
    model_of,
    split_argv,
)
from sglang_sentinel.supervise.launch import LaunchCommand, launch_version
from sglang_sentinel.supervise.probes import ProbeResult
from sglang_sentinel.supervise.settings import FallbackSettings
from sglang_sentinel.supervise.snapshot import FallbackView, frozen

__all__ = [
    "DISCARD_REASONS",
    "FALLBACK_FILE",
    "FALLBACK_REASONS",
    "LIVES_FILE",
    "Fallback",
    "FallbackView",
    "HostFacts",
]

_log = get_logger(__name__)

FALLBACK_FILE = "supervisor-fallback.json"
#: The rendered argv (secrets masked) of every launch, newest last, the last _MAX_LIVES of them.
LIVES_FILE = "server-lives.json"
_MAX_LIVES = 50
#: Label values of sentinel_server_fallback_total: what the configured launch did.
FALLBACK_REASONS: tuple[str, ...] = ("garbage", "nan_in_sampler")
#: Label values of sentinel_server_fallback_discarded_total: why a saved decision no longer applied.
DISCARD_REASONS: tuple[str, ...] = ("configuration_changed", "sglang_version_changed")
# (GPU model, driver version) of this host, either None when unknown.
HostFacts = Callable[[], tuple[str | None, str | None]]

_DSA_FLAGS = (
    "--nsa-prefill-backend",
    "--dsa-prefill-backend",
    "--nsa-decode-backend",
    "--dsa-decode-backend",
)


def _same_release(a: str, b: str) -> bool:
    """Whether two version texts name one release, as far as the less precise one says: a pinned
    launch may say "0.5.9" where the server reports more ("0.5.9.post1"); a text that is no version
    at all must match as written."""
    try:
        pa, pb = parse_version(a), parse_version(b)
    except ValueError:
        return a == b
    if pa[:3] != pb[:3]:
        return False
    # A post release or a pre-release on one side only: the other side did not say which.
    return pa == pb or pa[3:] == (0, "") or pb[3:] == (0, "")


def _with_flags(base: LaunchCommand, flags: Flags) -> LaunchCommand:
    """``base`` with its launch flags replaced by ``flags``; endpoint and secret flags stay base's
    (in the place ``flags`` had them, so a record of this very endpoint renders its own argv)."""
    prefix, own = split_argv(base.argv)
    _, shown = split_argv(base.redacted_argv())
    keep = {
        pair[0]: pair
        for pair, masked in zip(own, shown, strict=True)
        if pair[0] in ENDPOINT_FLAGS or pair != masked
    }
    out: list[tuple[str, tuple[str, ...]]] = []
    for name, values in flags:
        if name in keep:
            out.append(keep.pop(name))
        elif name not in ENDPOINT_FLAGS and "***" not in "".join(values):
            out.append((name, values))
    argv = join_argv(prefix, (*out, *keep.values()))
    secret = base.secret
    at = tuple(i for i, a in enumerate(argv) if secret and secret in a)
    return replace(base, argv=argv, secret_args=at)


class Fallback:
    """One supervisor's fallback: records, decision, its file. Runs on the supervisor's loop."""

    def __init__(
        self,
        settings: FallbackSettings,
        state_dir: Path | None,
        *,
        host_facts: HostFacts = lambda: (None, None),
    ) -> None:
        self.settings = settings
        self.store = KnownGoodStore(state_dir / KNOWN_GOOD_FILE if state_dir is not None else None)
        self._path = state_dir / FALLBACK_FILE if state_dir is not None else None
        self._lives_path = state_dir / LIVES_FILE if state_dir is not None else None
        self.lives: list[dict[str, Any]] = []
        self.host_facts = host_facts
        # Whether the running life runs exactly ``running`` (systemd mode: the unit's files were not
        # changed since it started; supervisor.py sets it). Only then is a sustained pass recorded.
        self.launch_known: Callable[[], bool] = lambda: True
        self.configured: LaunchCommand | None = None
        self.running: LaunchCommand | None = None
        self.version: str | None = None  # what the running server reported
        self.fallbacks: Counter[str] = Counter(dict.fromkeys(FALLBACK_REASONS, 0))
        self.discarded: Counter[str] = Counter(dict.fromkeys(DISCARD_REASONS, 0))
        self._failures: list[tuple[float, str, str]] = []  # (wall clock, reason, example) of `running`
        self._decision: dict[str, Any] | None = None
        self._good_since: float | None = None
        self._example = ""  # the last wrong answer seen
        self._exhausted = ""

    # ------------------------------------------------------------------ life cycle
    def begin(self, configured: LaunchCommand) -> LaunchCommand:
        """At start: the command to launch (a saved decision about this configured command wins)."""
        self.configured = self.running = configured
        self.store.load()
        self._load_lives()
        saved = self._load()
        if saved is None:
            return configured
        if saved.get("configured_hash") != configured.config_hash:
            self._discard(
                "configuration_changed",
                "the configured launch changed since the fallback was decided; trying it as configured",
                was=saved.get("configured_hash"),
                now=configured.config_hash,
            )
            return configured
        decided_for, now = saved.get("sglang_version"), launch_version(configured)
        if isinstance(decided_for, str) and now is not None and not _same_release(decided_for, now):
            # The same command line on another SGLang: what answered right on the old one says
            # nothing about the new one (and the table's rows are per release).
            self._discard(
                "sglang_version_changed",
                "SGLang is another version than the one the fallback was decided for; trying the "
                "configured launch",
                was=decided_for,
                now=now,
            )
            return configured
        try:
            flags = tuple((str(n), tuple(str(v) for v in vs)) for n, vs in saved["flags"])
            self._failures = [(float(t), str(r), str(e)) for t, r, e in saved.get("failures", [])]
        except (KeyError, TypeError, ValueError) as exc:
            _log.warning("server_fallback_file_malformed", path=str(self._path), error=str(exc))
            self._clear_file()
            return configured
        self._decision = saved
        self.running = _with_flags(configured, flags)
        _log.warning(
            "server_fallback_restored",
            since=saved.get("since"),
            reason=saved.get("reason"),
            configured_hash=configured.config_hash,
            fallback_hash=self.running.config_hash,
        )
        return self.running

    def preview(self, configured: LaunchCommand) -> dict[str, Any]:
        """What a fallback from ``configured`` would be now (``sentinel check``); changes nothing."""
        self.configured = self.running = configured
        self.store.load(set_aside=False)
        saved = None
        if self._path is not None and self._path.is_file():
            with contextlib.suppress(OSError, ValueError):
                saved = json.loads(self._path.read_text(encoding="utf-8"))
        found = self.candidate()
        out: dict[str, Any] = {
            "enabled": self.settings.enabled,
            "known_good_configs": len(self.store.records),
            "active": bool(
                isinstance(saved, dict)
                and "flags" in saved
                and saved.get("configured_hash") == configured.config_hash
            ),
        }
        if isinstance(found, str):
            return {**out, "fallback": None, "why_none": found}
        cmd, origin = found
        mine, theirs = split_argv(configured.redacted_argv())[1], split_argv(cmd.redacted_argv())[1]
        return {
            **out,
            "fallback": {"origin": origin, "config_hash": cmd.config_hash, "argv": cmd.redacted_argv()},
            "differences": diff_flags(mine, theirs),
        }

    def new_life(self) -> None:
        self._good_since = None
        self.version = None

    def note_launch(self, cmd: LaunchCommand | None) -> None:
        """Keep the argv of this life (secrets masked), on disk with the last ones."""
        if cmd is None:
            return
        source = "fallback" if self.active else "configured"
        life = {
            "at": time.time(),
            "argv_hash": cmd.config_hash,
            "source": source,
            "argv": cmd.redacted_argv(),
        }
        self.lives = [*self.lives, life][-_MAX_LIVES:]
        if self._lives_path is not None:
            self._write_to(self._lives_path, {"lives": self.lives})

    def _load_lives(self) -> None:
        if self._lives_path is None:
            return
        try:
            data = json.loads(self._lives_path.read_text(encoding="utf-8"))
            lives = data["lives"] if isinstance(data, dict) else None
            if not isinstance(lives, list) or not all(isinstance(x, dict) for x in lives):
                raise ValueError("no 'lives' list of objects")
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError) as exc:
            _log.warning("server_lives_file_malformed", path=str(self._lives_path), error=str(exc))
            return
        self.lives = lives[-_MAX_LIVES:]

    def set_version(self, version: str | None) -> bool:
        """What the running server reported. True when that ends a decision made for another
        SGLang version (discarded: the configured launch runs from now on; the caller relaunches)."""
        self.version = version
        d = self._decision
        if d is None or version is None or self.configured is None:
            return False
        decided_for = d.get("sglang_version")
        if not isinstance(decided_for, str) or not decided_for:
            # Decided before the version was known (a NaN crash before /server_info answered), or
            # by a sentinel that did not record it: the running fallback's version is the one.
            d["sglang_version"] = version
            self._save()
            return False
        if _same_release(decided_for, version):
            return False  # as at restore: "0.5.9" from a pinned launch is the 0.5.9.post1 reported
        self._discard(
            "sglang_version_changed",
            "the server reports another SGLang version than the one the fallback was decided for; "
            "relaunching the configured launch",
            was=decided_for,
            now=version,
        )
        return True

    def reconfigure(self, configured: LaunchCommand, why: str) -> bool:
        """The configured launch changed under a running sentinel: ``why`` "configuration_changed"
        (the unit's launch.env was edited) or "sglang_version_changed" (SGLang was upgraded under
        us and the command re-rendered: a decision ends even when the flags render the same). True
        when that ended a fallback: the configured launch runs from now on."""
        old = self.configured
        if why != "sglang_version_changed" and old is not None and configured.config_hash == old.config_hash:
            return False
        self.configured = configured
        if self._decision is None:
            self.running = configured
            if old is None or old.config_hash != configured.config_hash:
                self._failures = []  # about the launch that was configured
                self._exhausted = ""
            return False
        detail = {
            "configuration_changed": "the configured launch changed; trying it as configured",
            "sglang_version_changed": "SGLang was upgraded, the launch re-rendered; trying it as configured",
        }[why]
        self._discard(
            why,
            detail,
            was=old.config_hash if old is not None else None,
            now=configured.config_hash,
            sglang_version=launch_version(configured),
        )
        return True

    def _discard(self, why: str, detail: str, **fields: Any) -> None:
        """A saved decision that no longer applies: said, counted, its file removed."""
        self._decision = None
        self._failures = []
        self._exhausted = ""
        self.running = self.configured
        self.discarded[why] += 1
        _log.warning("server_fallback_discarded", reason=why, why=detail, **fields)
        self._clear_file()

    @property
    def active(self) -> bool:
        return self._decision is not None

    # ------------------------------------------------------------------ evidence
    def observe_canary(self, result: ProbeResult, probes: Mapping[str, ProbeResult], now: float) -> None:
        """Every canary result: a wrong answer is the example; a sustained pass makes a record."""
        if not result.ok:
            if result.reason == "wrong_answer" or result.reason.startswith("garbage"):
                self._good_since = None
                self._example = f"{result.probe}: {result.reason}: {result.detail[:120]!r}"
            return
        if not all(r.ok for name, r in probes.items() if name.startswith("canary_")):
            return
        if self._good_since is None:
            self._good_since = now
        if now - self._good_since >= self.settings.good_after and self.running is not None:
            if not self.launch_known():
                return  # what runs is not the command sentinel thinks (a unit started before an edit)
            gpu_model, driver = self.host_facts()
            cmd = self.running
            self.store.mark_good(
                cmd.config_hash,
                cmd.redacted_argv(),
                sglang_version=self.version or launch_version(cmd),
                driver_version=driver,
                gpu_model=gpu_model,
                profile=cmd.profile_name,
                now=now,
            )

    def note_failure(self, reason: str, example: str, now: float | None = None) -> bool:
        """A correctness failure of the running launch; True when a fallback is now due."""
        now = time.time() if now is None else now
        self._failures = [f for f in self._failures if now - f[0] <= self.settings.window]
        self._failures.append((now, reason, example or self._example))
        self._save_failures()
        if not self.settings.enabled or len(self._failures) < self.settings.failures:
            return False
        if self.active:
            if self._exhausted != "fallback failing too":
                self._exhausted = "fallback failing too"
                _log.error(
                    "server_fallback_failing_too",
                    why="the fallback configuration fails correctness as well; no second fallback",
                    failures=len(self._failures),
                )
            return False
        return True

    def note_garbage(self, since: float, reason: str) -> bool:
        return self.note_failure("garbage", self._example or reason)

    # ------------------------------------------------------------------ decision
    def candidate(self) -> tuple[LaunchCommand, str] | str:
        """(the fallback command, where it comes from), or why there is none."""
        base, running = self.configured, self.running
        if base is None or running is None:
            return "no launch command (child mode, or systemd mode with the unit's launch flags known)"
        version = self.version or launch_version(running)
        exclude = {base.config_hash, running.config_hash}
        # Only a record of this launch profile and this model: its flags replace the configured
        # ones, and one of another profile or model would serve something else than configured.
        model = model_of(split_argv(base.argv)[1])
        if "history" in self.settings.sources:
            gpu_model, driver = self.host_facts()
            found = self.store.candidates(
                version,
                (),
                profile=base.profile_name,
                model=model,
                gpu_model=gpu_model,
                driver_version=driver,
            )
            for rec in found:
                cmd = _with_flags(base, rec.flags)
                if cmd.config_hash not in exclude and rec.argv_hash not in exclude:
                    return cmd, "history"
        if "table" in self.settings.sources and base.profile.launch_table:
            row = glm5_choice(version, base.profile.gpu_arch)
            if row.verdict == "known_good":
                prefix = launch_facts(version, base.profile.gpu_arch).dsa_flag_prefix
                _, own = split_argv(base.argv)
                flags = (
                    *(p for p in own if p[0] not in _DSA_FLAGS and p[0] != "--kv-cache-dtype"),
                    (f"{prefix}-prefill-backend", (row.backends[0],)),
                    (f"{prefix}-decode-backend", (row.backends[1],)),
                    # As the profile renders a table row (launch.dsa_choice): the row's spelling.
                    ("--kv-cache-dtype", (row.kv_cache_dtype,)),
                )
                dsa = (row.backends[0], row.backends[1], row.kv_cache_dtype)
                cmd = replace(_with_flags(base, flags), launch_row=row, dsa=dsa)
                if cmd.config_hash not in exclude:
                    return cmd, f"table: {row.key}"
        known = len(self.store.records)
        mine = self.store.count_of(base.profile_name, model)
        return (
            f"no known-good configuration other than this one for SGLang {version or 'unknown'} "
            f"({known} record(s) on this host, {mine} of profile {base.profile_name} and this model"
            + (", no launch table" if not base.profile.launch_table else ", no known_good table row")
            + ")"
        )

    def available(self) -> bool:
        """Whether a fallback exists now (why not is logged, once per reason)."""
        found = self.candidate()
        if isinstance(found, str):
            if self._exhausted != found:
                self._exhausted = found
                _log.error("server_fallback_unavailable", why=found)
            return False
        return True

    def decide(self, reason: str) -> LaunchCommand | None:
        """Switch to the fallback (once per incident); None when there is none (said once)."""
        if self.active or self.configured is None or self.running is None or not self.available():
            return None
        found = self.candidate()
        assert not isinstance(found, str)
        cmd, origin = found
        configured = self.configured
        example = self._failures[-1][2] if self._failures else self._example
        differences = diff_flags(
            split_argv(configured.redacted_argv())[1], split_argv(cmd.redacted_argv())[1]
        )
        now = time.time()
        self._decision = {
            "configured_hash": configured.config_hash,
            "fallback_hash": cmd.config_hash,
            # What the choice was made for: a restored decision of another SGLang is discarded.
            "sglang_version": self.version or launch_version(self.running),
            # Secrets masked; the endpoint and key flags only keep their place (fallback: base's).
            "flags": [[n, list(v)] for n, v in split_argv(cmd.redacted_argv())[1]],
            "origin": origin,
            "since": now,
            "reason": reason,
            "example": example,
            "differences": differences,
            "failures": [],
        }
        self.fallbacks[reason] += 1
        self._failures = []
        self._exhausted = ""
        self.running = cmd
        self._save()
        _log.error(
            "server_fallback",
            reason=reason,
            example=example,
            origin=origin,
            configured_hash=configured.config_hash,
            fallback_hash=cmd.config_hash,
            differences=differences,
            configured_argv=configured.redacted_argv(),
            fallback_argv=cmd.redacted_argv(),
        )
        return cmd

    def back_to_configured(self) -> LaunchCommand | None:
        """``sentinel reset --configured``: end the incident; the configured command (None: none)."""
        if self.configured is None:
            return None
        was = self._decision
        self._decision = None
        self._failures = []
        self._exhausted = ""
        self.running = self.configured
        self._clear_file()
        if was is not None:
            _log.warning(
                "server_fallback_ended", configured_hash=self.configured.config_hash, since=was.get("since")
            )
        return self.configured

    # ------------------------------------------------------------------ what others read
    def view(self) -> FallbackView:
        d = self._decision or {}
        running = self.running
        now = time.time()
        return FallbackView(
            enabled=self.settings.enabled,
            source="fallback" if self.active else "configured",
            configured_hash=self.configured.config_hash if self.configured is not None else "",
            running_hash=running.config_hash if running is not None else "",
            since=d.get("since"),
            reason=str(d.get("reason", "")),
            example=str(d.get("example", "")),
            origin=str(d.get("origin", "")),
            differences=tuple(str(x) for x in d.get("differences", ())),
            running_argv=tuple(running.redacted_argv()) if running is not None else (),
            fallbacks=frozen(self.fallbacks),
            known_good=len(self.store.records),
            unreadable=self.store.unreadable,
            recent_failures=sum(1 for t, _, _ in self._failures if now - t <= self.settings.window),
            exhausted=self._exhausted,
            lives=tuple(frozen(life) for life in self.lives[-10:]),
            discarded=frozen(self.discarded),
        )

    # ------------------------------------------------------------------ the file
    def _load(self) -> dict[str, Any] | None:
        if self._path is None:
            return None
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            _log.warning("server_fallback_file_malformed", path=str(self._path), error=str(exc))
            return None
        if not isinstance(data, dict):
            return None
        if "flags" not in data:  # failures only: the incident so far, no decision yet
            try:
                self._failures = [(float(t), str(r), str(e)) for t, r, e in data.get("failures", [])]
            except (TypeError, ValueError):
                self._failures = []
            if data.get("configured_hash") != (self.configured.config_hash if self.configured else None):
                self._failures = []
            return None
        return data

    def _save_failures(self) -> None:
        if self._decision is not None:
            self._decision["failures"] = [list(f) for f in self._failures]
            self._save()
            return
        configured = self.configured.config_hash if self.configured is not None else ""
        self._write({"configured_hash": configured, "failures": [list(f) for f in self._failures]})

    def _save(self) -> None:
        if self._decision is not None:
            self._write(self._decision)

    def _write(self, doc: Mapping[str, Any]) -> None:
        if self._path is not None:
            self._write_to(self._path, doc)

    @staticmethod
    def _write_to(path: Path, doc: Mapping[str, Any]) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, json.dumps(doc, indent=1).encode())
        except OSError as exc:
            _log.warning("server_fallback_save_failed", path=str(path), error=str(exc))

    def _clear_file(self) -> None:
        if self._path is not None:
            try:
                self._path.unlink(missing_ok=True)
            except OSError as exc:
                _log.warning("server_fallback_save_failed", path=str(self._path), error=str(exc))
