"""Every shell command in README.md and docs/*.md runs as written on a fresh checkout, or is listed
below with the reason it is not run here.

The fenced ``sh``/``bash``/``shell``/``console`` blocks are split into commands (``\\``
continuations joined, comments and blank lines dropped). A command in `RUN` is run with bash in a
temporary copy of the checkout's tracked files (the venv's ``bin`` first on PATH, ``.venv``
linked in, as after the README's first command) and must exit 0 within its timeout; a command in
`SKIP` is not run, for the reason written beside it. A command in neither fails the test, so a new
block in the docs has to be made runnable here or be skipped on purpose.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SHELL_TAGS = frozenset({"sh", "bash", "shell", "console"})
_FENCE = re.compile(r"^[ \t]*```(\w*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)  # list items indent theirs


class Run(NamedTuple):
    timeout: float
    tool: str | None = None  # skipped (not failed) where this tool is not installed
    ok: frozenset[int] = frozenset({0})  # exit statuses that mean "ran as documented"
    expect: str = ""  # text its stdout must contain


# Run on a copy of the checkout.
RUN: dict[str, Run] = {
    "sentinel config --config deploy/config.example.toml": Run(60, expect='"schedule"'),
    "sentinel --help": Run(30, expect="reset"),
    # Exit 1 here: a preflight check fails on a box without 8 GPUs; the command line is still rendered.
    "sentinel check --config deploy/config.example.toml": Run(
        60, ok=frozenset({0, 1}), expect="command line:"
    ),
    "promtool check rules --lint-fatal deploy/alerts.yml": Run(60, "promtool"),
    # docs/alerting.md, "Runbooks": the shipped rules with another runbook base, still valid.
    "sed 's#https://sglang-sentinel.invalid/docs/runbooks/#https://git.example.com/ops/sglang-sentinel/"
    "-/blob/main/docs/runbooks/#' deploy/alerts.yml > sentinel-alerts.yml "
    "&& promtool check rules --lint-fatal sentinel-alerts.yml": Run(
        60, "promtool", expect="SUCCESS: 33 rules"
    ),
    "python3 grafana/generate.py --check": Run(60),
    "sentinel tune --help": Run(30, expect="--vary"),
}

# Not run here, each for its reason. Kept exact: an edited command must be re-listed.
SKIP: dict[str, str] = {
    # Installs from a package index and then runs the daemon until stopped.
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[report]' && .venv/bin/sentinel run": (
        "install + daemon"
    ),
    "bash scripts/test": "the whole test suite (this test is part of it)",
    # The rules' unit tests (seconds of CPU) run once in the suite, as written, there.
    "(cd deploy && promtool test rules *.test.yml)": "tests/deploy/test_deploy.py runs it as written",
    # scripts/test runs it before pytest; it installs the wheel with uv tool and pipx in throwaway dirs.
    "bash scripts/release-check": "the release artifacts step of scripts/test",
    "uv tool install dist/sglang_sentinel-0.3.0-py3-none-any.whl": (
        "installs into the user's tool dir: scripts/release-check runs it into a throwaway one"
    ),
    "scripts/build-image": "needs a container engine and Docker Hub (docs/release.md)",
    ".venv/bin/python -m pytest tests/deploy tests/grafana": "test suites of their own",
    # Need a running daemon on the default port (and another helper's daemon may hold it).
    "sentinel status": "needs a running daemon",
    "sentinel reset": "needs a running daemon in the failed state",
    "sentinel run --config deploy/config.example.toml --listen 127.0.0.1:9480 --server-port 30000": "daemon",
    # systemd, root and the GPU host.
    "systemctl reload sentinel": "systemd",
    "sudo apt-get install -y python3-venv polkitd dbus": "root, package index",
    "sudo deploy/install.sh": "root; tests/deploy/test_install.py runs it with --root",
    "sudo /opt/sglang/.venv/bin/pip install 'sglang[all]==0.5.9'": "root, package index, GPU host",
    "sudoedit /etc/sentinel/config.toml": "interactive editor",
    "sudo systemctl start sentinel": "systemd",
    "sudo systemctl restart sentinel": "systemd",
    "sudo systemctl restart sglang": "systemd",
    "systemd-analyze verify /etc/systemd/system/sentinel.service /etc/systemd/system/sglang.service": (
        "installed units only (a checkout's ExecStart binaries do not exist); tests/deploy verifies them"
    ),
    "git pull": "network",
    "sudo -u sentinel /opt/sentinel/.venv/bin/sentinel config --config /etc/sentinel/config.toml": (
        "installed venv and config"
    ),
    "sudo -u sentinel /opt/sentinel/.venv/bin/sentinel check --config /etc/sentinel/config.toml": (
        "installed venv and config"
    ),
    "ss -ltnp 'sport = :9480'": "the host's sockets",
    "ss -ltnp 'sport = :30000'": "the host's sockets",
    "nvidia-smi": "GPU host",
    # Long-running servers and loads against one.
    "sentinel sim --port 30000 &": "a server left running",
    "sentinel bench --backend sglang --port 30000 --num-prompts 64 --request-rate 16 "
    "--random-input-len 256 --random-output-len 256 --random-range-ratio 1 --output-file runs.jsonl": (
        "needs the simulator of the line before (tests/load/test_bench_command.py runs bench)"
    ),
    # docs/bench.md's Datasets examples: tests/load/test_bench_datasets_docs.py runs each on a simulator.
    **{
        cmd: "needs the simulator of the line before (tests/load/test_bench_datasets_docs.py runs it)"
        for cmd in (
            "sentinel bench --num-prompts 8 --random-input-len 64 --random-output-len 16 --request-rate 8",
            "sentinel bench --backend sglang-oai-chat --dataset-name sharegpt --dataset-path "
            "docs/examples/sharegpt_small.json --num-prompts 8 --sharegpt-output-len 16",
            "sentinel bench --dataset-name mooncake --dataset-path docs/examples/mooncake_trace.jsonl "
            "--mooncake-num-rounds 2",
            "sentinel bench --num-prompts 8 --random-input-len 64 --random-output-len 16 "
            "--request-rate 4 8 16",
            "sentinel bench --backend sglang-oai-chat --dataset-name generated-shared-prefix "
            "--gsp-system-prompt-len 64 --gsp-question-len 16 --gsp-output-len 8 --gsp-num-turns 3 "
            "--num-prompts 4 --max-concurrency 2",
            "sentinel bench --dataset-name generated-shared-prefix --gsp-num-groups 4 "
            "--gsp-prompts-per-group 3 --gsp-system-prompt-len 64 --gsp-question-len 16 --gsp-output-len 8 "
            "--gsp-range-ratio 0.5 "
            "--gsp-group-distribution zipf --gsp-zipf-alpha 1.2 --gsp-send-routing-key",
            "sentinel bench --backend sglang-oai-chat --dataset-name agentic-trace --dataset-path "
            "docs/examples/agentic_trace.json --sharegpt-output-len 16 --max-concurrency 2",
        )
    },
    "sentinel sim": "a server until stopped (tests/sim run it)",
    "sentinel sim --port 0 --ready-file /tmp/sim.json --speed 50 --enable-metrics": "a server until stopped",
    ".venv/bin/python benchmarks/profile_figures.py": "a benchmark (about a minute at real time)",
    ".venv/bin/python benchmarks/profile_figures.py --config deploy/config.example.toml --profile burst32": (
        "a benchmark"
    ),
    # A tune starts a server per configuration (tests/tune/test_tune_sim.py runs one on the simulator).
    "sentinel tune --config tune.toml --vary=--disable-cuda-graph=true,false "
    "--vary=--mem-fraction-static=0.8,0.85": "starts SGLang servers; needs a tune.toml",
    "sentinel tune --config tune.toml --json > tune.json": "starts SGLang servers; needs a tune.toml",
    "sentinel tune --config tune.toml --report tune-report/": "starts SGLang servers; needs a tune.toml",
    ".venv/bin/python benchmarks/tune_cost.py": "a benchmark (several minutes on the simulator)",
    # Elided flags ("..."): illustrations of a command's shape, not commands.
    "python -m sglang.bench_serving --backend sglang --port 30000 --num-prompts 64 --request-rate 16 ...": (
        "illustration; needs SGLang"
    ),
    "sentinel bench --backend sglang --port 30000 --num-prompts 64 --request-rate 16 ...": "illustration",
    "python -m sglang_sentinel_sim --port 0 ...": "illustration",
    "sentinel-sim --port 0 ...": "illustration",
    # Kubernetes: a cluster.
    "kubectl create namespace llm": "a cluster",
    "kubectl -n llm create secret generic sentinel-secrets --from-literal=api-key=... "
    "--from-file=web-users=./web-users": "a cluster",
    "helm install sentinel deploy/helm/sglang-sentinel -n llm "
    "--set existingSecret=sentinel-secrets": "a cluster",
    "helm install sentinel deploy/helm/sglang-sentinel -n llm --set existingSecret=sentinel-secrets "
    "--set podMonitor.enabled=true --set prometheusRule.enabled=true "
    "--set podMonitor.labels.release=<your kube-prometheus-stack release> "
    "--set prometheusRule.labels.release=<your kube-prometheus-stack release>": "a cluster",
}


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` outside quotes, after a blank)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(text: str) -> list[str]:
    """The commands of every shell block of one Markdown text, whitespace-normalised."""
    found = []
    for block in _FENCE.finditer(text):
        if block.group(1) not in SHELL_TAGS:
            continue
        pending = ""
        for raw in block.group(2).splitlines():
            line = _strip_comment(raw)
            if line.startswith("$ "):  # a console transcript's prompt
                line = line[2:]
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = " ".join((pending + line).split())
            pending = ""
            if line:
                found.append(line)
    return found


def _documented() -> list[tuple[str, str]]:
    return [(path.relative_to(ROOT).as_posix(), cmd) for path in DOCS for cmd in commands(path.read_text())]


def test_the_splitter_joins_continuations_and_drops_comments() -> None:
    text = "```sh\nsentinel a \\\n    --b 'x # y'   # why\n\n# only a comment\n```\n```text\nnot shell\n```\n"
    assert commands(text) == ["sentinel a --b 'x # y'"]


def test_every_documented_command_is_run_or_listed() -> None:
    documented = _documented()
    assert len(documented) > 20  # the walk found the docs' blocks (it would pass vacuously otherwise)
    unknown = [f"{where}: {cmd}" for where, cmd in documented if cmd not in RUN and cmd not in SKIP]
    assert unknown == [], "add each to RUN (runnable on a checkout) or SKIP (with a reason)"


def test_lists_name_only_documented_commands() -> None:
    # A stale entry would keep an exception alive after its command left the docs.
    seen = {cmd for _, cmd in _documented()}
    assert sorted((set(RUN) | set(SKIP)) - seen) == []
    assert set(RUN).isdisjoint(SKIP)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout's tracked (and unignored new) files, as a fresh clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.split(b"\0")
    dest = tmp_path_factory.mktemp("checkout")
    for name in filter(None, listed):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


@pytest.mark.parametrize("command", sorted(RUN))
@pytest.mark.slow
def test_documented_command_runs(command: str, checkout: Path) -> None:
    run = RUN[command]
    if run.tool is not None and shutil.which(run.tool) is None:
        pytest.skip(f"{run.tool} is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=checkout,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=run.timeout,
    )
    assert done.returncode in run.ok, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert run.expect in done.stdout
    assert "Traceback" not in done.stderr
