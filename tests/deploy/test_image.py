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
with the image. scripts/test installs podman and mmdebstrap (as root) and starts the build in the background
before the linters (tests/deploy/image_build.py, into $IMAGE_BUILD_DIR): this test then waits
for that build and checks it; run alone, it builds the image itself. Without podman and mmdebstrap
it skips and says what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import sglang_sentinel
from deploy.image_build import MMDEBSTRAP, PODMAN, BuildFailed, build, new_runroot, podman, run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PODMAN is None or MMDEBSTRAP is None, reason="podman and mmdebstrap (Debian packages) not installed"
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="an image build without a user namespace needs root"),
]
# Where scripts/test builds the image in the background (the test waits for it); unset: build here.
PREBUILT = os.environ.get("IMAGE_BUILD_DIR")


def _built(tmp_path: Path) -> tuple[Path, Path, str]:
    """(podman storage, its run root, image name) of the image under test."""
    if not PREBUILT:
        runroot = new_runroot()
        try:
            image = build(tmp_path / "build", sglang_sentinel.__version__, runroot)
        except BuildFailed as exc:
            shutil.rmtree(runroot, ignore_errors=True)
            pytest.fail(str(exc))
        return tmp_path / "build" / "storage", runroot, image
    out = Path(PREBUILT)
    deadline = time.monotonic() + 900  # a build takes one to three minutes; a stuck one fails here
    while not (out / "result.json").exists():
        if (out / "failed.txt").exists():
            pytest.fail("the image build scripts/test started failed: " + (out / "failed.txt").read_text())
        if time.monotonic() > deadline:
            pytest.fail(f"the image build scripts/test started has not finished ({out})")
        time.sleep(1)
    result = json.loads((out / "result.json").read_text())
    print(f"built by scripts/test in {result['seconds']:.0f} s")
    return out / "storage", Path(result["runroot"]), str(result["image"])


def test_the_image_builds_from_the_dockerfile_and_runs_as_its_user(tmp_path: Path) -> None:
    storage, runroot, image = _built(tmp_path)
    version = sglang_sentinel.__version__
    pod = podman(storage, runroot)
    try:
        (info,) = json.loads(run([*pod, "image", "inspect", image]))
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
        print(f"image {image}: {info['Size'] / 1e6:.0f} MB")  # reported in the test's output (-rP)

        mount = Path(run([*pod, "image", "mount", image]).strip())
        try:
            state = mount / "var" / "lib" / "sentinel"
            st = state.stat()
            assert (st.st_uid, st.st_gid) == (10001, 10001)
            assert "sentinel:x:10001:" in (mount / "etc" / "group").read_text()
            as_user = [
                "chroot", "--userspec=10001:10001", str(mount),
                "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
            ]  # fmt: skip
            assert run([*as_user, "sentinel", "--version"], timeout=60).strip() == f"sentinel {version}"
            config_run = subprocess.run(
                [*as_user, "sentinel", "config"], capture_output=True, text=True, timeout=60, check=False
            )
            assert config_run.returncode == 0, config_run.stderr
            assert json.loads(config_run.stdout)["state_dir"] == "/var/lib/sentinel"
            assert "Warning" not in config_run.stderr, config_run.stderr  # e.g. no local time zone
        finally:
            run([*pod, "image", "umount", image])
    finally:
        shutil.rmtree(runroot, ignore_errors=True)
