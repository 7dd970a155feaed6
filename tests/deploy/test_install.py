"""deploy/install.sh in a throwaway root: users, venvs, directories and owners, polkit rule, units
enabled, and `systemd-analyze verify --root` clean on what it installed; then --uninstall."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "deploy" / "install.sh"
DEBIAN_PYTHON = Path("/usr/bin/python3")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="install.sh creates users: needs root"),
    pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers missing"),
    pytest.mark.skipif(not DEBIAN_PYTHON.exists(), reason="no Debian python3 (/usr/bin/python3)"),
]


def _seed_os(root: Path) -> None:
    """What a fresh Debian root has before install.sh runs: systemd's own units (sysinit.target,
    multi-user.target, ...), /bin/kill (procps) and python3 (python3-venv's interpreter)."""
    (root / "usr/bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    shutil.copy2("/usr/bin/kill", root / "usr/bin/kill")
    real = DEBIAN_PYTHON.resolve()
    shutil.copy2(real, root / "usr/bin" / real.name)
    if real.name != "python3":
        (root / "usr/bin/python3").symlink_to(real.name)


def _install(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(DEBIAN_PYTHON)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        ["bash", str(INSTALL), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def _passwd(root: Path) -> dict[str, list[str]]:
    return {line.split(":")[0]: line.split(":") for line in (root / "etc/passwd").read_text().splitlines()}


def _owner(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


@pytest.mark.slow(seconds=25)
def test_install_into_a_clean_root_then_uninstall(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _seed_os(root)
    done = _install(root)
    assert done.returncode == 0, done.stdout + done.stderr

    users = _passwd(root)
    assert {"sentinel", "sglang"} <= set(users)
    s_uid, s_gid = int(users["sentinel"][2]), int(users["sentinel"][3])
    g_uid, g_gid = int(users["sglang"][2]), int(users["sglang"][3])
    groups = {
        line.split(":")[0]: line.split(":")[3] for line in (root / "etc/group").read_text().splitlines()
    }
    assert "sentinel" in groups["systemd-journal"].split(",")
    assert "sglang" in groups["video"].split(",")

    assert _owner(root / "var/lib/sentinel") == (s_uid, s_gid, 0o750)
    assert _owner(root / "var/lib/sglang") == (g_uid, g_gid, 0o750)
    assert _owner(root / "etc/sentinel") == (0, s_gid, 0o750)
    assert _owner(root / "etc/sentinel/config.toml") == (0, s_gid, 0o640)
    assert (root / "etc/polkit-1/rules.d/50-sentinel.rules").read_text() == (
        ROOT / "deploy/sentinel-polkit.rules"
    ).read_text()
    wants = root / "etc/systemd/system/multi-user.target.wants"
    assert os.readlink(wants / "sentinel.service") == "/etc/systemd/system/sentinel.service"
    assert not (wants / "sglang.service").exists()  # sentinel starts it, not boot
    # Documentation= points at files that are there.
    assert (root / "opt/sentinel/README.md").exists()
    assert (root / "opt/sentinel/docs/supervise.md").exists()

    sentinel = root / "opt/sentinel/.venv/bin/sentinel"
    version = subprocess.run([sentinel, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    # The installed example config is valid for the installed sentinel.
    check = subprocess.run(
        [root / "opt/sentinel/.venv/bin/python", "-c",
         "import sys; from sglang_sentinel.config import load_settings;"
         " load_settings(sys.argv[1], environ={})",
         root / "etc/sentinel/config.toml"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert (root / "opt/sglang/.venv/bin/python").exists()

    if SYSTEMD_ANALYZE is not None:
        verify = subprocess.run(
            [SYSTEMD_ANALYZE, "verify", f"--root={root}", "--man=no",
             "/etc/systemd/system/sentinel.service", "/etc/systemd/system/sglang.service"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert verify.returncode == 0, verify.stderr
        assert verify.stderr.strip() == "", verify.stderr

    # Again: idempotent, and an edited config is kept.
    (root / "etc/sentinel/config.toml").write_text("# mine\n")
    again = _install(root, "--no-venv")
    assert again.returncode == 0, again.stdout + again.stderr
    assert (root / "etc/sentinel/config.toml").read_text() == "# mine\n"
    assert _passwd(root)["sentinel"][2] == str(s_uid)

    gone = _install(root, "--uninstall", "--purge")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not (root / "etc/systemd/system/sentinel.service").exists()
    assert not (wants / "sentinel.service").is_symlink()
    assert not (root / "etc/polkit-1/rules.d/50-sentinel.rules").exists()
    assert not (root / "opt/sentinel").exists()
    assert not (root / "var/lib/sentinel").exists()
    assert "sentinel" not in _passwd(root)
    # SGLang's side is kept: its venv and caches took long to make.
    assert "sglang" in _passwd(root)
    assert (root / "var/lib/sglang").exists()


def test_an_upgrade_keeps_the_launch_flags_and_every_edited_file(tmp_path: Path) -> None:
    """Re-running install.sh (an upgrade) never loses what the operator changed: launch.env is
    never rewritten, a unit edited since install is kept as .dpkg-old (and said so), a unit
    nobody touched is replaced silently."""
    root = tmp_path / "root"
    _seed_os(root)
    first = _install(root, "--no-venv")
    assert first.returncode == 0, first.stdout + first.stderr
    launch = root / "etc/sglang/launch.env"
    assert launch.read_text() == (ROOT / "deploy/sglang-launch.env").read_text()
    units = root / "etc/systemd/system"

    mine = 'SGLANG_ARGS="--model-path /models/mine --tp-size 4 --port 30000"\n'
    launch.write_text(mine)
    edited = (units / "sglang.service").read_text().replace("TimeoutStopSec=180", "TimeoutStopSec=600")
    (units / "sglang.service").write_text(edited)
    again = _install(root, "--no-venv")
    assert again.returncode == 0, again.stdout + again.stderr
    assert launch.read_text() == mine
    assert (units / "sglang.service.dpkg-old").read_text() == edited
    assert (units / "sglang.service").read_text() == (ROOT / "deploy/sglang.service").read_text()
    assert "/etc/systemd/system/sglang.service was changed since it was installed" in again.stdout
    assert not (units / "sentinel.service.dpkg-old").exists()
    assert "sentinel.service was changed" not in again.stdout

    # Unchanged since: replaced without a word, the earlier .dpkg-old left as it was.
    third = _install(root, "--no-venv")
    assert third.returncode == 0, third.stdout + third.stderr
    assert "was changed" not in third.stdout
    assert (units / "sglang.service.dpkg-old").read_text() == edited

    # Uninstalled (no --purge) during a fallback: the unit's fallback flags go with the unit (a
    # later install must not start SGLang with them before sentinel decides again); sentinel's
    # state, the decision included, and the operator's launch.env stay.
    state = root / "var/lib/sentinel"
    (state / "sglang-fallback.env").write_text('SGLANG_ARGS="--model-path /models/mine --tp-size 2"\n')
    (state / "supervisor-fallback.json").write_text("{}")
    gone = _install(root, "--uninstall")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not (state / "sglang-fallback.env").exists()
    assert (state / "supervisor-fallback.json").exists()
    assert launch.read_text() == mine


def test_an_upgrade_over_an_install_that_recorded_nothing_keeps_an_edited_unit(tmp_path: Path) -> None:
    # An older install.sh wrote no checksums, and its README said to edit ExecStart= in the unit.
    root = tmp_path / "root"
    _seed_os(root)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    old = (
        "[Service]\nExecStart=/opt/sglang/.venv/bin/python -m sglang.launch_server \\\n"
        "    --model-path /models/mine \\\n    --tp-size 4\nKillMode=mixed\n"
    )
    (units / "sglang.service").write_text(old)
    done = _install(root, "--no-venv")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (units / "sglang.service.dpkg-old").read_text() == old
    assert "kept as /etc/systemd/system/sglang.service.dpkg-old" in done.stdout
    # Its flags moved into launch.env, which the new unit reads: the server starts as before.
    launch = (root / "etc/sglang/launch.env").read_text()
    assert 'SGLANG_ARGS="--model-path /models/mine --tp-size 4"\n' in launch
    assert "moved the launch flags" in done.stdout


def test_install_refuses_unknown_options(tmp_path: Path) -> None:
    done = _install(tmp_path / "r", "--bogus")
    assert done.returncode == 2
    assert "unknown option --bogus" in done.stderr
