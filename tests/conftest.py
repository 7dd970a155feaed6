"""Suite-wide fixtures. ``sim_factory`` starts simulator subprocesses on free ports
(``sglang_sentinel_sim.testing.start_sim``: ``python -m sglang_sentinel_sim``).

Usage::

    def test_x(sim_factory):
        sim = sim_factory("--enable-metrics", "--speed", "50")
        httpx.get(sim.base_url + "/health")   # 200: sim_factory waited for readiness
        sim.control("/summary")               # ground truth from the control API

    def test_slow(sim_factory):
        sim = sim_factory("--fault", "slow_start:refuse=5", wait_ready=False)

Defaults added unless the caller passes them: ``--speed 100`` and ``--lifetime 600`` (a safety net
so that no simulator outlives a crashed test run). Every simulator runs in its own session and
its whole process group is SIGKILLed at teardown. Logs are kept in files under ``tmp_path``:
``sim.stderr_text()`` (SGLang's log lines) and ``sim.stdout_text()`` (access lines).

The simulators are forked from a per-worker process that has imported the simulator once
(support/sim_zygote.py: a start's CPU is mostly imports); each runs what ``python -m
sglang_sentinel_sim ARGS`` runs. The simulators that the daemons and supervisors under test launch
are started by them, as deployed.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sglang_sentinel_sim.testing import SimProcess, start_sim
from support.sim_zygote import Zygote

REPO_ROOT = Path(__file__).resolve().parent.parent


def _has(args: tuple[str, ...], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files), made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="session")
def sim_zygote() -> Iterator[Zygote]:
    zygote = Zygote()
    yield zygote
    zygote.close()


@pytest.fixture
def sim_factory(tmp_path: Path, sim_zygote: Zygote) -> Iterator[Callable[..., SimProcess]]:
    started: list[SimProcess] = []
    # Names (log files) from a counter, not len(started): callers may start several at once from
    # threads (each start waits for the simulator's import and bind, a second or more when busy).
    names = itertools.count()

    def start(
        *args: str, wait_ready: bool = True, timeout: float = 30.0, env: dict[str, str] | None = None
    ) -> SimProcess:
        extra: list[str] = []
        if not _has(args, "--speed"):
            extra += ["--speed", "100"]
        if not _has(args, "--lifetime"):
            extra += ["--lifetime", "600"]
        sim = start_sim(
            *extra,
            *args,
            log_dir=tmp_path,
            name=f"sim{next(names)}",
            wait_ready=wait_ready,
            timeout=timeout,
            env=env,
            cwd=REPO_ROOT,
            spawner=sim_zygote.spawn,
        )
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.kill()


# --- opt-in peer tests (helper PEER): `pytest --run-peer` runs tests marked `peer` -----------------
# pytest_addoption only works in the rootdir conftest or a plugin, hence this small block here.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-peer",
        action="store_true",
        default=False,
        help="run tests marked `peer` (SGLang's bench_serving against the simulator; needs "
        "benchmarks/peer_setup.sh)",
    )


# Tests marked xdist_group that pytest-xdist's loadgroup failed to group (see below).
_UNGROUPED: set[str] = set()


def pytest_collection_finish(session: pytest.Session) -> None:
    # An `xdist_group` mark keeps its tests on one worker (an expensive module fixture set up
    # once): xdist's loadgroup does it by appending "@group" to the node IDs on each worker. With
    # pytest 9.2 that silently stopped working (https://github.com/pytest-dev/pytest-xdist/issues/1386):
    # the tests still passed, each worker setting the fixture up again. Such a test now errors
    # saying why (an exception here would be an INTERNALERROR of xdist's, without the message).
    if getattr(session.config.option, "loadgroup", False):
        _UNGROUPED.update(
            item.nodeid
            for item in session.items
            if item.get_closest_marker("xdist_group") is not None
            and "@" not in item.nodeid.rsplit("::", 1)[-1]
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.nodeid in _UNGROUPED:
        raise RuntimeError(
            "pytest-xdist's loadgroup did not group this test (marked xdist_group): this pytest and "
            "pytest-xdist do not work together (see pyproject.toml's pin of pytest)"
        )


def _order(item: pytest.Item) -> tuple[bool, float]:
    slow = item.get_closest_marker("slow")
    return slow is None, -float(slow.kwargs.get("seconds", 0)) if slow is not None else 0.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Slow tests first, the longest (``slow(seconds=N)``) first of all; a stable sort: the order is
    # otherwise the collection's. xdist's loadgroup scheduler hands tests out in that order as
    # workers free up, so a 40 s test handed out late runs alone at the end (measured: the last
    # 40 s of a run at about one core of two); started first, the short tests fill the other
    # workers around it. The same order on every worker (xdist checks).
    items.sort(key=_order)
    if config.getoption("--run-peer"):
        return
    skip = pytest.mark.skip(reason="peer test: opt in with --run-peer")
    for item in items:
        if item.get_closest_marker("peer") is not None:  # not `in keywords`: that has dir names too
            item.add_marker(skip)
