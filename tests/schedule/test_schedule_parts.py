"""State directory, budget, polite-injection parsing and decisions, breaker, run plans."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_sentinel.config import ConfigError, load_settings
from sglang_sentinel.load import ArrivalProcess
from sglang_sentinel.schedule.breaker import BreakerSignals, trip_reason
from sglang_sentinel.schedule.budget import WINDOW_SECONDS, TokenBudget
from sglang_sentinel.schedule.executor import spec_for
from sglang_sentinel.schedule.plan import plan_run
from sglang_sentinel.schedule.polite import (
    LoadReadError,
    ServerLoad,
    ServerLoadReader,
    decide,
    parse_loads_json,
    parse_metrics_text,
    too_busy_now,
)
from sglang_sentinel.schedule.settings import BreakerSettings, LoadProfileSettings, PoliteSettings
from sglang_sentinel.statedir import StateDir

# Real SGLang output (copies of the project's reference samples, kept in the repository).
SAMPLES = Path(__file__).resolve().parents[1] / "collect" / "samples"

# --- state directory -----------------------------------------------------------------------------


def test_json_documents_are_atomic_and_survive(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "s")
    state.ensure()
    assert state.read_json("x.json") is None
    assert state.write_json("x.json", {"a": 1})
    assert StateDir(tmp_path / "s").read_json("x.json") == {"a": 1}
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.endswith(".tmp")]
    (tmp_path / "s" / "bad.json").write_text("{not json")
    assert state.read_json("bad.json") is None
    (tmp_path / "s" / "list.json").write_text("[1]")
    assert state.read_json("list.json") is None


def test_history_is_bounded_and_skips_torn_lines(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    for i in range(25):
        assert state.append("h.jsonl", {"i": i}, limit=5)
    lines = (tmp_path / "h.jsonl").read_text().splitlines()
    assert len(lines) <= 10
    assert [r["i"] for r in state.history("h.jsonl", limit=5)] == [20, 21, 22, 23, 24]
    with (tmp_path / "h.jsonl").open("a") as fh:
        fh.write('{"i": 99, "torn')  # a crash mid-append
    assert state.history("h.jsonl")[-1]["i"] == 24
    assert state.append("h.jsonl", {"i": 100}, limit=5)
    assert state.history("h.jsonl")[-1]["i"] == 100


def test_unusable_state_dir_is_a_clear_error(tmp_path: Path) -> None:
    from sglang_sentinel.statedir import StateError

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StateError, match="a-file"):
        StateDir(blocker / "state").ensure()


def test_write_failure_is_counted_not_raised(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "missing-dir")
    assert state.write_json("x.json", {"a": 1}) is False
    assert state.append("h.jsonl", {"a": 1}, limit=3) is False
    assert state.write_failures == 2


# --- budget --------------------------------------------------------------------------------------


def test_budget_never_exceeds_any_hour() -> None:
    now = [0.0]
    budget = TokenBudget(1000, clock=lambda: now[0])
    a = budget.reserve(600)
    assert a is not None
    assert budget.reserve(500) is None  # would exceed
    now[0] = 100.0
    budget.settle(a, 400)  # spent less than reserved: the rest comes back
    b = budget.reserve(600)
    assert b is not None
    assert budget.remaining() == 0
    now[0] = 200.0
    budget.settle(b, 600)
    # The first run ended at t=100: it stops counting an hour after its end, not its start.
    now[0] = 100 + WINDOW_SECONDS - 1
    assert budget.remaining() == 0
    now[0] = 100 + WINDOW_SECONDS
    assert budget.remaining() == 400
    budget.settle(b, 10_000)  # an unknown/expired reservation is ignored: nothing comes back or goes
    assert budget.remaining() == 400


def test_budget_restore_and_limit_change() -> None:
    now = [10_000.0]
    budget = TokenBudget(1000, clock=lambda: now[0])
    budget.restore([(9000.0, 9100.0, 300), (1000.0, 2000.0, 900)])  # the second expired long ago
    assert budget.spent() == 300
    budget.set_limit(200)
    assert budget.remaining() == 0
    assert budget.reserve(1) is None


# --- polite injection ----------------------------------------------------------------------------


def test_parse_metrics_dedupes_tp_ranks() -> None:
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} 5\n'
        'sglang:num_running_reqs{model_name="m",tp_rank="1"} 5\n'
        "# TYPE sglang:num_queue_reqs gauge\n"
        'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 2\n'
        'sglang:num_queue_reqs{model_name="m",tp_rank="1"} 2\n'
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{model_name="m",tp_rank="0"} 0.4\n'
    )
    load = parse_metrics_text(text)
    assert (load.running, load.queued, load.token_usage) == (5, 2, 0.4)
    assert load.foreign(3) == 4
    assert load.foreign(10) == 0


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("sglang-metrics-pr*.txt")))
def test_parse_real_metrics_samples(name: str) -> None:
    text = (SAMPLES / name).read_text()
    if "sglang:num_running_reqs" not in text:
        with pytest.raises(LoadReadError):
            parse_metrics_text(text)
        return
    # Real dumps may be excerpts that break the parser: either figures or a clean error.
    try:
        load = parse_metrics_text(text)
    except LoadReadError:
        return
    assert load.running >= 0


@pytest.mark.parametrize("text", ["", "garbage {{{", "# TYPE x gauge\nx 1\n", "sglang:num_running_reqs 3\n"])
def test_parse_metrics_errors(text: str) -> None:
    with pytest.raises(LoadReadError):
        parse_metrics_text(text)


def test_parse_loads_json() -> None:
    doc: dict[str, Any] = {
        "loads": [
            {"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 1, "token_usage": 0.2},
            {"dp_rank": 1, "num_running_reqs": 4, "num_waiting_reqs": 0, "token_usage": 0.7},
        ],
        "aggregate": {"total_running_reqs": 7, "total_waiting_reqs": 1},
    }
    # /v1/loads is computed on request: live, compared with the own count now.
    assert parse_loads_json(doc) == ServerLoad(7, 1, 0.7, live=True)
    del doc["aggregate"]
    assert parse_loads_json(doc) == ServerLoad(7, 1, 0.7, live=True)
    bad: object
    for bad in ([], {"loads": [{"num_running_reqs": "x"}]}, {"aggregate": {"total_running_reqs": True}}, {}):
        with pytest.raises(LoadReadError):
            parse_loads_json(bad)


async def test_reader_over_http() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer k"
        if request.url.path == "/v1/loads":
            return httpx.Response(200, json={"aggregate": {"total_running_reqs": 2, "total_waiting_reqs": 0}})
        if request.url.path == "/metrics":
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(500)

    loads = ServerLoadReader("http://sim", "loads", 1.0, "k", transport=httpx.MockTransport(handler))
    assert (await loads.read()).running == 2
    await loads.aclose()
    metrics = ServerLoadReader("http://sim", "metrics", 1.0, "k", transport=httpx.MockTransport(handler))
    with pytest.raises(LoadReadError, match="HTTP 404"):
        await metrics.read()
    await metrics.aclose()

    # auto: /v1/loads while the server has it; a server without it falls back to the gauges.
    auto = ServerLoadReader("http://sim", "auto", 1.0, "k", transport=httpx.MockTransport(handler))
    load = await auto.read()
    assert (load.running, load.live) == (2, True)
    await auto.aclose()

    def old_server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/loads":
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(200, text="sglang:num_running_reqs 3\nsglang:num_queue_reqs 1\n")

    seen: list[str] = []

    def counting(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return old_server(request)

    auto = ServerLoadReader("http://sim", "auto", 1.0, transport=httpx.MockTransport(counting))
    for _ in range(2):
        load = await auto.read()
        assert (load.running, load.queued, load.live) == (3, 1, False)
    await auto.aclose()
    assert seen == ["/v1/loads", "/metrics", "/metrics"]  # asked once, then remembered

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    # A refused port says nothing about the endpoint: an error, not a fallback.
    down = ServerLoadReader("http://sim", "auto", 1.0, transport=httpx.MockTransport(refuse))
    with pytest.raises(LoadReadError, match="GET /v1/loads: connect"):
        await down.read()
    await down.aclose()

    down = ServerLoadReader("http://sim", "metrics", 1.0, transport=httpx.MockTransport(refuse))
    with pytest.raises(LoadReadError, match="GET /metrics: connect"):
        await down.read()
    await down.aclose()


def test_decide() -> None:
    s = PoliteSettings(shrink_above=2, skip_above=10, shrink_capacity_requests=20, tolerance=1)
    assert decide(ServerLoad(1, 0), 0, s).action == "run"  # within tolerance
    d = decide(ServerLoad(5, 1), 0, s)
    assert (d.action, d.foreign, d.scale) == ("shrink", 5, 0.75)
    assert decide(ServerLoad(20, 5), 0, s).action == "skip"
    assert decide(ServerLoad(5, 1), 0, s.model_copy(update={"action": "skip"})).action == "skip"
    assert decide(None, 0, s).action == "run"
    assert decide(None, 0, s.model_copy(update={"on_unknown": "skip"})).reason == "load_unknown"
    assert decide(ServerLoad(99, 0), 0, s.model_copy(update={"enabled": False})).action == "run"
    # Mid-run: our own in-flight requests are not foreign.
    assert too_busy_now(ServerLoad(30, 0), 30, s) is None
    assert too_busy_now(ServerLoad(41, 0), 30, s) == 10
    with pytest.raises(ValueError, match="shrink_above"):
        PoliteSettings(shrink_above=5, skip_above=2)


# --- breaker and plans ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signals", "reason"),
    [
        (BreakerSignals(finished=3, failed=3), None),  # too few to judge
        (BreakerSignals(finished=10, failed=3), "error_ratio"),
        (BreakerSignals(finished=10, failed=2), None),
        (BreakerSignals(kv_usage=0.99), "kv_usage"),
        (BreakerSignals(max_gpu_temperature_celsius=95.0), "gpu_temperature"),
        (BreakerSignals(gpu_throttled=True), "gpu_throttle"),
        (BreakerSignals(kv_usage=0.5, max_gpu_temperature_celsius=70.0, gpu_throttled=False), None),
    ],
)
def test_breaker(signals: BreakerSignals, reason: str | None) -> None:
    settings = BreakerSettings(max_error_ratio=0.2, min_requests=8)
    assert trip_reason(signals, settings) == reason
    assert trip_reason(signals, settings.model_copy(update={"enabled": False})) is None


def test_plan_scales_prompts_rate_and_concurrency() -> None:
    p = LoadProfileSettings(num_prompts=64, request_rate=16, max_concurrency=32)
    full = plan_run("r", p, 1.0)
    assert (full.num_prompts, full.request_rate, full.max_concurrency, full.full_size) == (64, 16, 32, True)
    assert full.max_tokens == 65 * 512
    half = plan_run("r", p, 0.5)
    assert (half.num_prompts, half.request_rate, half.max_concurrency, half.full_size) == (32, 8, 16, False)
    assert plan_run("r", p, 0.001).num_prompts == 1


def test_request_rate_inf_in_toml_sends_all_prompts_at_once(tmp_path: Path) -> None:
    # TOML has no null: `inf` is the only way a config file can ask for a burst.
    cfg = tmp_path / "c.toml"
    cfg.write_text("[schedule.profiles.burst]\nnum_prompts = 32\nrequest_rate = inf\n")
    p = load_settings(cfg, environ={}).schedule.profiles["burst"]
    for scale in (1.0, 0.5):
        plan = plan_run("burst", p, scale)
        assert plan.request_rate is None
        spec = spec_for(plan, "http://127.0.0.1:1")
        assert (spec.arrival, spec.request_rate) == (ArrivalProcess.BURST, math.inf)
        record = {"request_rate": plan.request_rate, "settings": plan.settings.model_dump()}
        json.dumps(record, allow_nan=False)  # no Infinity in runs.jsonl


def test_schedule_settings_validation(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[schedule.profiles.nightly]\ncron = '0 3 * * *'\nnum_prompts = 32\n")
    s = load_settings(cfg, environ={})
    assert s.schedule.profiles["nightly"].cron == "0 3 * * *"
    assert set(s.schedule.profiles) == {"nightly"}
    for body, needle in [
        ("[schedule.profiles.x]\ncron = 'every day'\n", "crontab"),
        ("[schedule.profiles.x]\ncron = '0 3 * * *'\ninterval_seconds = 60\n", "not both"),
        ("[schedule.profiles.x]\ninterval_seconds = -1\n", "greater than 0"),
        ("[schedule.profiles.'bad name']\n", "profile name"),
        ("[schedule.budget]\ntokens_per_hour = -5\n", "tokens_per_hour"),
        ("[schedule]\nrecalibrate_cron = '61 * * * *'\n", "crontab"),
    ]:
        cfg.write_text(body)
        with pytest.raises(ConfigError, match=needle):
            load_settings(cfg, environ={})
    env = {"SENTINEL_SCHEDULE__BUDGET__TOKENS_PER_HOUR": "42"}
    assert load_settings(None, environ=env).schedule.budget.tokens_per_hour == 42
    assert json.dumps(load_settings(None, environ={}).schedule.model_dump(mode="json"))


# One reference run's energy figures (collect.gpu.energy.energy_figures): 8 GPUs at ~600 W.
ENERGY = {
    "joules": 96000.0,
    "joules_per_output_token": 2.5,
    "output_tokens_per_joule": 0.4,
    "mean_power_watts": 4800.0,
    "marginal_joules_per_output_token": 1.9,
    "baseline_power_watts": 1200.0,
    "energy_cost_per_million_output_tokens": 0.17,
    "currency": "EUR",
}


def test_energy_figures_go_absent_with_the_run_that_had_them() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from sglang_sentinel.schedule.metrics import ScheduleMetrics

    m = ScheduleMetrics()
    m.set_energy("reference", ENERGY)
    m.set_energy("reference", {**ENERGY, "energy_cost_per_million_output_tokens": None, "joules": None})
    registry = CollectorRegistry()
    registry.register(m)
    text = generate_latest(registry)
    assert b'sentinel_load_energy_joules{profile="reference"}' not in text
    assert b"sentinel_load_energy_cost_per_million_output_tokens{" not in text
    assert b'sentinel_load_power_watts{profile="reference"} 4800.0' in text
    m.clear_figures("reference")
    assert b'sentinel_load_power_watts{profile="reference"}' not in generate_latest(registry)
    # Not metered: no energy reason is declared.
    plain = ScheduleMetrics()
    plain.declare_profiles(["reference"])
    registry = CollectorRegistry()
    registry.register(plain)
    assert b"sentinel_load_energy_unavailable_total{" not in generate_latest(registry)


def test_exposition_passes_promtool_lint() -> None:
    import shutil
    import subprocess
    import time

    from prometheus_client import CollectorRegistry, generate_latest

    from sglang_sentinel.schedule.metrics import RequestTimings, RunFigures, ScheduleMetrics

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool missing (Debian package prometheus)")
    m = ScheduleMetrics()
    m.energy_metered = True
    m.declare_profiles(["reference"])
    m.set_figures("reference", RunFigures(196.0, 451.0, 31.0, 64.0, False, time.time()))
    m.observe("reference", [RequestTimings(0.2, 0.08, 20.0, [0.08, 0.07])])
    m.set_capacity(208.0, 16.0, None, time.time(), knee_tokens_per_joule=0.4, efficient_concurrency=32)
    m.set_energy("reference", ENERGY)
    m.energy_alert_ratio.set(1.15)
    m.skipped.labels("reference", "budget").inc()
    registry = CollectorRegistry()
    registry.register(m)
    text = generate_latest(registry)
    # Unknown capacity figures are absent, not 0.
    assert b"sentinel_capacity_slo_concurrency" not in text
    assert b'sentinel_capacity_knee_concurrency{bound="measured"} 16.0' in text
    assert b'sentinel_load_energy_joules_per_output_token{profile="reference"} 2.5' in text
    assert b'sentinel_load_energy_cost_per_million_output_tokens{currency="EUR",profile="reference"}' in text
    assert b'sentinel_load_energy_unavailable_total{profile="reference",reason="counter_reset"} 0.0' in text
    assert b"sentinel_capacity_output_tokens_per_joule 0.4" in text
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


def test_own_traffic_matches_a_sampled_gauge_with_the_window_peak() -> None:
    from sglang_sentinel.schedule.polite import OwnTraffic, assess

    now = [1000.0]
    own = OwnTraffic(clock=lambda: now[0])
    for t, n in ((0, 0), (1, 20), (2, 30), (3, 12), (4, 0)):
        now[0] = 1000.0 + t
        own.note(n)
    s = PoliteSettings(gauge_max_age_seconds=30)
    # The gauge still shows 28 of our requests from a moment ago; we have none in flight now.
    stale = assess(ServerLoad(28, 0), own, s)
    assert (stale.foreign, stale.own, stale.source, stale.own_window_seconds) == (0, 30, "metrics", 30)
    # A live figure is compared with the own count now: 28 foreign requests are 28 - tolerance.
    live = assess(ServerLoad(28, 0, live=True), own, s)
    assert (live.foreign, live.own, live.source) == (27, 0, "loads")
    assert live.fields()["server_running"] == 28
    # Past the window the old peak no longer covers a gauge: foreign again.
    now[0] += 31
    assert assess(ServerLoad(28, 0), own, s).foreign == 27
