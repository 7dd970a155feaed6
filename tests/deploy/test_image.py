"""The container image, built from the Dockerfile as shipped, then opened and run as its USER.

The Dockerfile's base (python:3.11.N-slim-bookworm, pinned by digest) lives on Docker Hub, which
the CI box cannot reach; Debian's package mirror it can. So the base is made here the way Docker's
Debian images are made, from Debian bookworm's own packages (mmdebstrap: the same release and the
same Python minor as the pinned base, python3 3.11 as `python`, the tools the Dockerfile's RUN lines
use), imported into podman, and the Dockerfile is built on it through its `BASE` build argument,
nothing else changed: both stages, the wheel installed by pip from the package index, the labels,
the user and group, the healthcheck.

The image is then checked as a user would meet it: its labels say the package version, licence and
revision; it runs as 10001:10001 with ``sentinel`` as entrypoint; the state directory is that
user's; and ``sentinel --version`` / ``sentinel config`` run inside its filesystem as that user.
They run under ``chroot``, not ``podman run``: this box's sandbox refuses the OCI runtime its
resource limits (crun: "setrlimit RLIMIT_NPROC: Operation not permitted"), which has nothing to do
with the image. scripts/test installs podman and mmdebstrap (as root); without them this skips and
says what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import sglang_sentinel

REPO = Path(__file__).resolve().parents[2]
PODMAN = shutil.which("podman")
MMDEBSTRAP = shutil.which("mmdebstrap")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PODMAN is None or MMDEBSTRAP is None, reason="podman and mmdebstrap (Debian packages) not installed"
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="an image build without a user namespace needs root"),
]

# What python:3.11-slim-bookworm has that the Dockerfile relies on: `python` (3.11) with venv and
# the shadow tools for its groupadd/useradd; and what that image's own Dockerfile installs beside
# Python (ca-certificates, netbase, tzdata: without a zone the scheduler warns at every start).
BASE_PACKAGES = "python3,python3-venv,python-is-python3,passwd,ca-certificates,netbase,tzdata"


def _run(args: list[str], timeout: float = 600) -> str:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{' '.join(args[:6])}…: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def _host_trust() -> list[str]:
    """The build trusts what this host trusts: a package index reached through a proxy with its own
    CA is reached from inside the build too (pip reads /etc/pip.conf; its `cert` names the bundle)."""
    mounts = []
    for path in ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt"):
        if Path(path).is_file():
            mounts += ["--volume", f"{path}:{path}:ro"]
    return mounts


def test_the_image_builds_from_the_dockerfile_and_runs_as_its_user(tmp_path: Path) -> None:
    assert PODMAN is not None
    assert MMDEBSTRAP is not None
    # A storage of its own: nothing shared with other builds on this machine, gone with tmp_path.
    # The run root (podman's state: locks, mounts) must be a short path (at most 50 characters),
    # which tmp_path is not: a temporary directory of its own, removed after.
    with tempfile.TemporaryDirectory(prefix="podman-") as runroot:
        _build_and_check([PODMAN, "--root", str(tmp_path / "storage"), "--runroot", runroot], tmp_path)


def _build_and_check(podman: list[str], tmp_path: Path) -> None:
    assert MMDEBSTRAP is not None
    base_tar = tmp_path / "base.tar"
    _run([
        MMDEBSTRAP, "--variant=apt", f"--include={BASE_PACKAGES}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "bookworm", str(base_tar),
    ])  # fmt: skip
    _run([*podman, "import", str(base_tar), "localhost/sentinel-base:bookworm"])
    base_tar.unlink()  # 170 MB, imported

    version = sglang_sentinel.__version__
    image = f"localhost/sglang-sentinel:{version}"
    _run([
        *podman, "build", "--format", "docker", "--isolation", "chroot", *_host_trust(),
        "--build-arg", "BASE=localhost/sentinel-base:bookworm",
        "--build-arg", f"VERSION={version}", "--build-arg", "REVISION=test",
        "--tag", image, str(REPO),
    ])  # fmt: skip

    (info,) = json.loads(_run([*podman, "image", "inspect", image]))
    config = info["Config"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.revision"] == "test"
    assert labels["org.opencontainers.image.source"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["sentinel"]
    assert config["Cmd"] == ["run", "--listen", "0.0.0.0:9480"]
    assert "/healthz" in " ".join(info["Healthcheck"]["Test"])  # --format docker keeps it
    env = dict(e.split("=", 1) for e in config["Env"])
    print(f"image {image}: {info['Size'] / 1e6:.0f} MB")  # reported in the test's output (-s / -rP)

    mount = Path(_run([*podman, "image", "mount", image]).strip())
    try:
        state = mount / "var" / "lib" / "sentinel"
        st = state.stat()
        assert (st.st_uid, st.st_gid) == (10001, 10001)
        group = (mount / "etc" / "group").read_text()
        assert "sentinel:x:10001:" in group
        as_user = [
            "chroot",
            "--userspec=10001:10001",
            str(mount),
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in env.items()),
        ]
        assert _run([*as_user, "sentinel", "--version"], timeout=60).strip() == f"sentinel {version}"
        result = subprocess.run(
            [*as_user, "sentinel", "config"], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["state_dir"] == "/var/lib/sentinel"
        assert "Warning" not in result.stderr, result.stderr  # e.g. no local time zone
    finally:
        _run([*podman, "image", "umount", image])
