"""deploy/: systemd units, example config, Prometheus scrape config, alert rules and their tests."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from sglang_sentinel.config import Settings, load_settings
from sglang_sentinel.sglang.versions import Version

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMTOOL = shutil.which("promtool")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus)")
# The shipped rule files: alerts.yml for every install, alerts-dcgm.yml beside it on Kubernetes.
RULE_FILES = ("alerts.yml", "alerts-dcgm.yml")
# The README's command for the rules' unit tests.
RULE_TESTS = "(cd deploy && promtool test rules *.test.yml)"


def _sections(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted names of every nested section model (not dict-of-model entries)."""
    out = set()
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.add(prefix + name)
            out |= _sections(ann, prefix + name + ".")
    return out


def _present(doc: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for key, value in doc.items():
        if isinstance(value, dict):
            out.add(prefix + key)
            out |= _present(value, prefix + key + ".")
    return out


def test_example_config_is_valid_and_covers_every_section() -> None:
    path = DEPLOY / "config.example.toml"
    settings = load_settings(path, environ={})
    assert settings.server.mode == "systemd"
    assert settings.schedule.profiles["reference"].num_prompts == 64
    doc = tomllib.loads(path.read_text())
    # Sections that exist only when switched on (TLS) are shown commented out in the file.
    optional = {"exporter.tls"}
    missing = _sections(Settings) - _present(doc) - optional
    assert not missing, f"config.example.toml lacks sections: {sorted(missing)}"
    assert "# [exporter.tls]" in path.read_text()


# A key shown commented out ("# url = ...", "# [exporter.tls]"): its default is "unset", which TOML
# cannot write, or the section exists only when switched on.
_COMMENTED_SETTING = re.compile(r"^# ?(\[[\w.-]+\]|[a-z_]+ = .*)$")


def _missing_keys(model: type[BaseModel], doc: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the fields of ``model`` (recursing into section models) absent from ``doc``.

    Named entries of a table of models (``[server.profiles.NAME]``, ``[schedule.profiles.NAME]``)
    and list items (``[[...canaries]]``) are examples, not sections: they need not set every key.
    """
    missing = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in doc:
            missing.append(prefix + key)
            continue
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            missing += _missing_keys(ann, doc[key], prefix + key + ".")
    return missing


def test_example_config_shows_every_key_of_every_section() -> None:
    text = (DEPLOY / "config.example.toml").read_text()
    # Commented-out settings count as shown; uncommented they must still be valid TOML and config.
    uncommented = "\n".join(
        m.group(1) if (m := _COMMENTED_SETTING.match(line)) else line for line in text.splitlines()
    )
    doc = tomllib.loads(uncommented)
    Settings.model_validate(doc)
    missing = _missing_keys(Settings, doc)
    assert not missing, f"config.example.toml does not show: {missing}"


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze missing")
def test_units_verify_cleanly(tmp_path: Path) -> None:
    sentinel = Path(sys.executable).with_name("sentinel")
    replacements = {
        "sentinel.service": ("/opt/sentinel/.venv/bin/sentinel", str(sentinel)),
        "sglang.service": ("/opt/sglang/.venv/bin/python", sys.executable),
    }
    for name, (old, new) in replacements.items():
        text = (DEPLOY / name).read_text()
        assert old in text
        (tmp_path / name).write_text(text.replace(old, new))
    assert SYSTEMD_ANALYZE is not None
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", *(str(tmp_path / n) for n in replacements)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # verify exits 0 on unknown keys: any output at all is a finding.
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
    unit = (DEPLOY / "sentinel.service").read_text()
    for needed in (
        "Type=notify",
        "WatchdogSec=",
        "NotifyAccess=main",
        "RestartPreventExitStatus=2",
        "ExecReload=",
    ):
        assert needed in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    # PrivateDevices= hides /dev/nvidia*: NVML would see no GPU.
    assert not re.search(r"^PrivateDevices=", unit, re.MULTILINE)


def _env_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= reading of the double-quoted values the shipped file uses:
    comments skipped, a backslash-newline joins lines, the quotes go."""
    text = re.sub(r"\\\n", "", text)
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip().removeprefix('"').removesuffix('"')
    return env


def test_the_unit_ends_clean_on_sglangs_own_sigkill_and_has_no_start_limit() -> None:
    """SGLang's shutdown ends with kill_process_tree SIGKILLing its own main process: a routine stop
    must leave the unit inactive, and systemd must not rate-limit the starts sentinel governs."""
    unit = (DEPLOY / "sglang.service").read_text()
    assert re.search(r"^SuccessExitStatus=SIGKILL$", unit, re.M)
    assert re.search(r"^KillMode=mixed$", unit, re.M)
    assert re.search(r"^StartLimitIntervalSec=0$", unit, re.M)
    assert not re.search(r"^StartLimitBurst=", unit, re.M)


def test_the_unit_reads_sentinels_fallback_flags_after_launch_env_where_the_example_config_says() -> None:
    """[server.fallback] in systemd mode: sentinel writes the fallback's SGLANG_ARGS into an optional
    environment file read after launch.env (the later assignment wins), at every start: no
    daemon-reload. The example config names the same files and variable."""
    unit = (DEPLOY / "sglang.service").read_text()
    files = re.findall(r"^EnvironmentFile=(.*)$", unit, re.M)
    assert files == ["/etc/sglang/launch.env", "-/var/lib/sentinel/sglang-fallback.env"]
    systemd = load_settings(DEPLOY / "config.example.toml", environ={}).server.systemd
    assert [str(systemd.launch_env), "-" + str(systemd.fallback_env)] == files
    assert f"${systemd.args_variable}" in re.findall(r"^ExecStart=(.*)$", unit, re.M)[0].split()
    # sentinel's state directory is where the file goes (sentinel.service may write only there).
    assert "StateDirectory=sentinel" in (DEPLOY / "sentinel.service").read_text()
    install = (DEPLOY / "install.sh").read_text()
    assert 'rm -f "$root/var/lib/sentinel/sglang-fallback.env"' in install


@needs_promtool
def test_sglang_unit_runs_what_sentinel_check_renders_for_its_version() -> None:
    """deploy/sglang.service is written for SGLang 0.5.9; its ExecStart flags and Environment= are
    what the launch profile renders for that version (`sentinel check` with 0.5.9 installed), so
    the unit and the docs' "keep the flags in step with sentinel check" cannot drift apart."""
    from sglang_sentinel.supervise.launch import render_command

    unit = (DEPLOY / "sglang.service").read_text()
    launch_env = (DEPLOY / "sglang-launch.env").read_text()
    assert "0.5.9" in launch_env
    # One restarter (README "One restarter", docs/supervise.md): no Restart= other than "no".
    assert re.findall(r"^Restart=(?!no$).*", unit, re.M) == []
    assert re.search(r"^EnvironmentFile=/etc/sglang/launch.env$", unit, re.M)
    assert re.search(
        r"^ExecStart=/opt/sglang/.venv/bin/python -m sglang.launch_server \$SGLANG_ARGS$", unit, re.M
    )
    flags = _env_file(launch_env)["SGLANG_ARGS"].replace(" --log-level info", "").split()
    assert flags[0] == "--model-path"
    settings = load_settings(DEPLOY / "config.example.toml", environ={}).server
    settings = settings.model_copy(update={"mode": "child", "profile": "glm5-nvfp4-rtxpro6000"})
    command = render_command(settings, detected_version=Version(0, 5, 9))
    argv = list(command.argv)
    rendered = argv[argv.index("--model-path") :]
    assert sorted(flags) == sorted(rendered)
    env = dict(
        kv.split("=", 1) for line in re.findall(r"^Environment=(.*)$", unit, re.M) for kv in line.split()
    )
    assert {k: env[k] for k in command.env} == dict(command.env)


@pytest.mark.slow
def test_alert_rules_check_and_unit_tests_as_shipped() -> None:
    assert PROMTOOL is not None
    for rules in RULE_FILES:
        check = subprocess.run(
            [PROMTOOL, "check", "rules", "--lint-fatal", str(DEPLOY / rules)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
    # Exactly what the README and alerts.yml tell an operator to run, annotations and all, as
    # written: the one run of the rules' unit tests in the suite (tests/test_docs_commands.py lists
    # this command as run here; tests/k8s compares the chart's rules with these files).
    tests = sorted(p.name for p in DEPLOY.glob("*.test.yml"))
    assert tests == ["alerts-dcgm.test.yml", "alerts-weekly.test.yml", "alerts.test.yml"]
    assert f"\n{RULE_TESTS}\n" in (DEPLOY.parent / "README.md").read_text()
    result = subprocess.run(
        ["bash", "-c", RULE_TESTS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=DEPLOY.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(tests), result.stdout


def _alert_blocks() -> dict[str, str]:
    blocks: dict[str, str] = {}
    for rules in RULE_FILES:
        text = (DEPLOY / rules).read_text()
        blocks |= {b.split("\n", 1)[0].strip(): b for b in re.split(r"\n\s+- alert: ", text)[1:]}
    return blocks


def test_every_alert_has_severity_summary_and_action() -> None:
    blocks = _alert_blocks()
    assert len(blocks) >= 30
    for name, block in blocks.items():
        assert re.search(r"severity: (critical|warning|info)\b", block), name
        assert "summary:" in block, name
        assert "action:" in block, name


def test_every_alert_is_unit_tested_firing_with_its_annotations() -> None:
    tested = "".join(p.read_text() for p in DEPLOY.glob("*.test.yml"))
    # Each test case is an alertname followed by its expected alerts; a firing case has labels
    # and the rendered annotations (what the operator reads).
    firing = set(
        re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels: .*\n\s+exp_annotations:", tested)
    )
    missing = set(_alert_blocks()) - firing
    assert not missing, f"alerts without a firing unit test: {sorted(missing)}"


def test_counters_born_with_their_first_event_are_tested() -> None:
    # An exporter that creates a counter with its first event ("_" = no sample before): the
    # alerts on first events must fire for it too (increase() alone cannot see it).
    tested = (DEPLOY / "alerts.test.yml").read_text()
    born = re.findall(r"series: '(\w+)_total\{.*\n\s+values: '_", tested)
    assert {"sentinel_gpu_xid_errors", "sentinel_load_aborts", "sentinel_load_skipped"} <= set(born)


@needs_promtool
def test_prometheus_config_is_valid(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    shutil.copy(DEPLOY / "alerts.yml", tmp_path / "alerts.yml")
    config = (DEPLOY / "prometheus.yml").read_text()
    assert "/etc/prometheus/rules/sentinel-alerts.yml" in config
    (tmp_path / "prometheus.yml").write_text(
        config.replace("/etc/prometheus/rules/sentinel-alerts.yml", str(tmp_path / "alerts.yml"))
    )
    result = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    port = load_settings(None, environ={}).exporter.port
    assert f"127.0.0.1:{port}" in config


def test_the_image_user_and_group_are_the_ones_the_docs_prepare_volumes_for() -> None:
    # README: `install -d -o 10001 -g 10001`; a group left to useradd --system would be 999.
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    assert re.search(r"groupadd --system --gid 10001 sentinel", dockerfile)
    assert re.search(r"useradd --system --uid 10001 --gid 10001 ", dockerfile)
    assert "-o 10001 -g 10001" in (DEPLOY.parent / "README.md").read_text()
