"""Build the container image from the Dockerfile on a base made from Debian's packages.

What tests/deploy/test_image.py checks, as a module of its own so that scripts/test can start the
build in the background before the linters and the release checks (it waits on the network and on
dpkg more than it computes, beside work that leaves a core idle) and the test only checks the
result; run alone, the test builds it itself. Usage: ``python tests/deploy/image_build.py DIR``
builds into ``DIR/storage`` (podman's storage) and writes ``DIR/result.json`` (the image's name, the
podman run root to use with that storage, the build's duration) or ``DIR/failed.txt`` (why).
See test_image.py for why the base is made here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PODMAN = shutil.which("podman")
MMDEBSTRAP = shutil.which("mmdebstrap")

# What python:3.11-slim-bookworm has that the Dockerfile relies on: `python` (3.11) with venv and
# the shadow tools for its groupadd/useradd; and what that image's own Dockerfile installs beside
# Python (ca-certificates, netbase, tzdata: without a zone the scheduler warns at every start).
BASE_PACKAGES = "python3,python3-venv,python-is-python3,passwd,ca-certificates,netbase,tzdata"


class BuildFailed(Exception):
    pass


def run(args: list[str], timeout: float = 600) -> str:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise BuildFailed(f"{' '.join(args[:6])}…: {result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result.stdout


def _host_trust() -> list[str]:
    """The build trusts what this host trusts: a package index reached through a proxy with its own
    CA is reached from inside the build too (pip reads /etc/pip.conf; its `cert` names the bundle)."""
    mounts = []
    for path in ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt"):
        if Path(path).is_file():
            mounts += ["--volume", f"{path}:{path}:ro"]
    return mounts


def podman(storage: Path, runroot: Path) -> list[str]:
    """podman on a storage of its own (nothing shared with other builds on this machine). Its run
    root (locks, mounts) must be a short path (at most 50 characters, which a test's tmp_path is
    not) and the same for every command on that storage (podman records it): made by
    :func:`new_runroot`, kept with the build's result, removed by whoever is done with the image."""
    assert PODMAN is not None
    return [PODMAN, "--root", str(storage), "--runroot", str(runroot)]


def new_runroot() -> Path:
    return Path(tempfile.mkdtemp(prefix="podman-"))


def build(out: Path, version: str, runroot: Path) -> str:
    """Make the base, build the image into ``out / "storage"``; returns the image's name."""
    assert MMDEBSTRAP is not None
    out.mkdir(parents=True, exist_ok=True)
    base_tar = out / "base.tar"
    run([
        MMDEBSTRAP, "--variant=apt", f"--include={BASE_PACKAGES}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "bookworm", str(base_tar),
    ])  # fmt: skip
    image = f"localhost/sglang-sentinel:{version}"
    pod = podman(out / "storage", runroot)
    run([*pod, "import", str(base_tar), "localhost/sentinel-base:bookworm"])
    base_tar.unlink()  # 170 MB, imported
    run([
        *pod, "build", "--format", "docker", "--isolation", "chroot", *_host_trust(),
        "--build-arg", "BASE=localhost/sentinel-base:bookworm",
        "--build-arg", f"VERSION={version}", "--build-arg", "REVISION=test",
        "--tag", image, str(REPO),
    ])  # fmt: skip
    return image


def main(out: Path) -> int:
    sys.path.insert(0, str(REPO / "daemon"))
    from sglang_sentinel import __version__

    began = time.monotonic()
    runroot = new_runroot()
    try:
        image = build(out, __version__, runroot)
    except (BuildFailed, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(runroot, ignore_errors=True)
        (out / "failed.txt").write_text(str(exc))
        return 1
    result = {"image": image, "runroot": str(runroot), "seconds": time.monotonic() - began}
    (out / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
