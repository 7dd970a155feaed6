"""Everything ``sentinel run`` would reject, checked before anything starts.

``sentinel config`` and ``sentinel run`` call the same function, so a config that ``config``
accepts does not fail at ``run`` a minute later (and ``run`` fails before its exporter binds or
its child starts). The checks that need nothing but the values live in the settings models
(pydantic validators: regexes, ranges, backoff order); this module holds the ones that read
files or resolve names: the exporter's TLS and users files, the launch profile (rendered as it
would be launched), and the simulator's own argument check for a profile that runs it.

Each problem is one line naming the field; :func:`validate` raises :class:`ConfigError` with all
of them.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

from sglang_sentinel.config import ConfigError

if TYPE_CHECKING:
    from sglang_sentinel.config import Settings

__all__ = ["check_files", "check_profile", "validate"]

# The simulator validates its arguments (faults included) in a fraction of a second; a profile
# whose interpreter hangs must not hang `sentinel config`.
_SIM_CHECK_TIMEOUT_SECONDS = 30.0
_SIM_MODULE = "sglang_sentinel_sim"


def check_files(settings: Settings) -> list[str]:
    """The exporter's TLS and users files, read as the exporter will read them."""
    from sglang_sentinel.export.auth import ExporterConfigError, load_users, tls_context

    problems: list[str] = []
    exporter = settings.exporter
    if exporter.basic_auth_users_file is not None:
        try:
            load_users(exporter.basic_auth_users_file)
        except ExporterConfigError as exc:
            problems.append(f"exporter.basic_auth_users_file: {exc}")
    if exporter.tls is not None:
        try:
            tls_context(exporter.tls)
        except ExporterConfigError as exc:
            problems.append(f"exporter.tls: {exc}")
    return problems


def check_profile(settings: Settings) -> list[str]:
    """Child mode: the launch profile resolves and renders; a simulator profile's arguments parse."""
    from sglang_sentinel.supervise.launch import ProfileError, render_command

    server = settings.server
    if server.mode != "child":
        return []
    try:
        # No version detection (it imports torch): flag names follow the pin or the newest known
        # behaviour, which is enough to know the profile can be rendered at all.
        command = render_command(server)
    except ProfileError as exc:
        return [f"server.profile: {exc}"]
    from sglang_sentinel.group import member_of

    member = member_of(settings.group)
    if member is not None:  # a simulator checks the multi-node flags too
        command = member.apply(command)
    argv = list(command.argv)
    for i in command.secret_args:  # the key stays out of this process's argv (ps) too
        argv[i] = argv[i].replace(command.secret, "checking")
    if _SIM_MODULE not in argv[1:3]:
        return []
    try:
        done = subprocess.run(
            [*argv, "--check-args"],
            capture_output=True,
            text=True,
            timeout=_SIM_CHECK_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"server.profile {command.profile_name!r}: cannot run the simulator's check: {exc}"]
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return [f"server.profile {command.profile_name!r}: {why.removeprefix('sentinel-sim: ')}"]
    return []


def validate(settings: Settings) -> None:
    """Raise :class:`ConfigError` listing every problem of the files and the profile."""
    problems = check_files(settings) + check_profile(settings)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
