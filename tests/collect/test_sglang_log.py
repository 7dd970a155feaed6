"""Log-derived series from the real SGLang log samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_sentinel.collect import SGLangLogCollector

SAMPLES = Path(__file__).resolve().parent / "samples"


def lines(name: str) -> list[str]:
    return [ln for ln in (SAMPLES / name).read_text().splitlines() if not ln.startswith("# source")]


def scrape(c: SGLangLogCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in c.collect() for s in m.samples}


def get(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_decode_lines(clock: Clock) -> None:
    c = SGLangLogCollector(clock=clock)
    for line in lines("sglang-decode-log-pr22331.txt"):
        c.feed(line)
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_lines_total") == 8
    assert get(s, "sentinel_sglang_log_batch_lines_total", dp_rank="0", kind="decode") == 8
    assert get(s, "sentinel_sglang_log_gen_throughput_tokens_per_second", dp_rank="0") == 157.11
    assert get(s, "sentinel_sglang_log_running_requests", dp_rank="0") == 5
    assert get(s, "sentinel_sglang_log_queued_requests", dp_rank="0") == 0
    assert get(s, "sentinel_sglang_log_token_usage_ratio", dp_rank="0") == 0.29
    assert get(s, "sentinel_sglang_log_used_tokens", dp_rank="0") == 20800
    assert get(s, "sentinel_sglang_log_cuda_graph", dp_rank="0") == 1
    assert get(s, "sentinel_sglang_log_last_line_timestamp_seconds") == clock.now
    assert get(s, "sentinel_sglang_log_last_batch_timestamp_seconds", dp_rank="0", kind="decode") == clock.now
    assert c.last_success_timestamp() == clock.now


def test_mixed_prefill_decode_and_access_lines(clock: Clock) -> None:
    c = SGLangLogCollector(clock=clock)
    for line in lines("sglang-mixed-log-pr22166.txt"):
        clock.now += 0.1
        c.feed(line)
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_lines_total") == 10
    assert get(s, "sentinel_sglang_log_batch_lines_total", dp_rank="0", kind="prefill") == 3
    assert get(s, "sentinel_sglang_log_batch_lines_total", dp_rank="0", kind="decode") == 1
    assert get(s, "sentinel_sglang_log_prefill_tokens_total", dp_rank="0") == 158 + 290 + 160
    assert get(s, "sentinel_sglang_log_prefill_sequences_total", dp_rank="0") == 3
    assert get(s, "sentinel_sglang_log_prefill_cached_tokens_total", dp_rank="0") == 0
    assert get(s, "sentinel_sglang_log_input_throughput_tokens_per_second", dp_rank="0") == 4099.38
    # The newest batch line (a prefill) gives running/queued; gen throughput only from Decode lines.
    assert get(s, "sentinel_sglang_log_running_requests", dp_rank="0") == 31
    assert get(s, "sentinel_sglang_log_gen_throughput_tokens_per_second", dp_rank="0") == 1635.11


def test_cuda_graph_off_and_old_format(clock: Clock) -> None:
    c = SGLangLogCollector(clock=clock)
    c.feed(
        "[2025-11-11 04:06:27] Decode batch, #running-req: 46, #token: 34901, token usage: 0.19, "
        "cuda graph: False, gen throughput (token/s): 1447.08, #queue-req: 0, "
    )
    assert get(scrape(c), "sentinel_sglang_log_cuda_graph", dp_rank="0") == 0
    # Feb-2025 layout: no cuda graph field at all -> the series is absent, not 0.
    for line in lines("sglang-decode-log-issue3909-old-format.txt"):
        c.feed(line)
    s = scrape(c)
    assert ("sentinel_sglang_log_cuda_graph", (("dp_rank", "0"),)) not in s
    assert get(s, "sentinel_sglang_log_gen_throughput_tokens_per_second", dp_rank="0") == pytest.approx(
        184.38
    )


def test_dp_ranks_are_kept_apart(clock: Clock) -> None:
    c = SGLangLogCollector(clock=clock)
    for line in lines("sglang-decode-log-dp-pd-pr17392.txt"):
        c.feed(line)
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_gen_throughput_tokens_per_second", dp_rank="0") == 1774.38
    assert get(s, "sentinel_sglang_log_gen_throughput_tokens_per_second", dp_rank="2") == 1392.52
    assert get(s, "sentinel_sglang_log_running_requests", dp_rank="3") == 21


def test_every_sample_file_feeds_without_error(clock: Clock) -> None:
    c = SGLangLogCollector(clock=clock)
    total = 0
    for path in sorted(SAMPLES.glob("sglang-*log*.txt")):
        for line in lines(path.name):
            c.feed(line)
            total += 1
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_lines_total") == total
    unparsed = [v for k, v in s.items() if k[0] == "sentinel_sglang_log_lines_unparsed_total"]
    assert len(unparsed) == 8  # every kind x reason, at 0 from the start
    assert sum(unparsed) == 0


def test_stale_gauges_disappear_but_timestamps_stay(clock: Clock) -> None:
    c = SGLangLogCollector(stale_after=60, clock=clock)
    for line in lines("sglang-decode-log-pr22331.txt"):
        c.feed(line)
    fed_at = clock.now
    clock.now += 61  # idle or stalled: SGLang prints nothing either way
    s = scrape(c)
    assert not [k for k in s if k[0] == "sentinel_sglang_log_gen_throughput_tokens_per_second"]
    assert not [k for k in s if k[0] == "sentinel_sglang_log_running_requests"]
    assert get(s, "sentinel_sglang_log_last_batch_timestamp_seconds", dp_rank="0", kind="decode") == fed_at
    assert get(s, "sentinel_sglang_log_batch_lines_total", dp_rank="0", kind="decode") == 8


def test_unparseable_batch_lines_and_events_are_counted(clock: Clock) -> None:
    c = SGLangLogCollector(clock=clock)
    c.feed("[2026-01-01 00:00:00 TP0] Decode batch, #running-req: lots, garbage")
    c.feed("complete nonsense \x00\xff")
    c.feed("")
    c.feed(
        "[2026-01-01 00:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_tokens_gained: 1024, #new_token_ratio: 0.4 -> 0.6"
    )
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_lines_total") == 4
    assert get(s, "sentinel_sglang_log_lines_unparsed_total", kind="decode", reason="bad_value") == 1
    assert get(s, "sentinel_sglang_log_lines_unparsed_total", kind="decode", reason="missing_field") == 0
    assert get(s, "sentinel_sglang_log_kv_retractions_total") == 1
    assert get(s, "sentinel_sglang_log_retracted_requests_total") == 3


def test_nothing_fed_yet() -> None:
    c = SGLangLogCollector()
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_lines_total") == 0
    assert c.last_success_timestamp() is None
    assert not [k for k in s if k[0] == "sentinel_sglang_log_last_line_timestamp_seconds"]


def test_fed_by_the_supervisors_line_listener() -> None:
    """The daemon's wiring: every line the supervisor's bus publishes reaches ``feed``."""
    from sglang_sentinel.supervise.logbus import LogBus

    c = SGLangLogCollector(clock=lambda: 1007.0)
    bus = LogBus(None, max_bytes=4096, backups=0, tail_lines=10)
    bus.add_listener(lambda line: c.feed(line.text))
    for text in lines("sglang-decode-log-pr22331.txt"):
        bus.publish(text, "child")
    bus.close()
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_batch_lines_total", dp_rank="0", kind="decode") == 8
    assert get(s, "sentinel_sglang_log_last_line_timestamp_seconds") == 1007.0  # the line's own read time


def test_unparsed_reasons_and_nan_sanitized(clock: Clock) -> None:
    c = SGLangLogCollector(clock=clock)
    c.feed("[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, cuda graph: True")  # no usage
    c.feed("[2026-01-01 00:00:00 TP0] Prefill batch; #new-seq: 1")  # not the ", " head
    assert get(scrape(c), "sentinel_sglang_log_nan_sanitized_total") == 0
    c.feed(
        "[2026-01-01 00:00:01 TP0] NaN detected in sampler: next_token_logits; values were sanitized "
        "before sampling. This usually indicates numerical overflow (e.g. fp16 activations) or an "
        "upstream bug producing NaN. Logged once; further occurrences are silent."
    )
    s = scrape(c)
    assert get(s, "sentinel_sglang_log_lines_unparsed_total", kind="decode", reason="missing_field") == 1
    assert get(s, "sentinel_sglang_log_lines_unparsed_total", kind="prefill", reason="bad_head") == 1
    assert get(s, "sentinel_sglang_log_nan_sanitized_total") == 1
