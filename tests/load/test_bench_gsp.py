"""`sentinel bench --dataset-name generated-shared-prefix`'s bench_serving 0.5.23 options:
--gsp-prompts-per-group, --gsp-ordered, --gsp-range-ratio, --gsp-group-distribution /
--gsp-zipf-alpha, --gsp-send-routing-key (`datasets/generated_shared_prefix.py`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import build_parser, main
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.bench_datasets import dataset_warnings
from sglang_sentinel.cli.common import CliError
from sglang_sentinel.load.datasets import Prompt, PromptSource
from sglang_sentinel.load.spec import LoadSpec, SharedPrefixDataset

_GSP = [
    "--dataset-name", "generated-shared-prefix", "--gsp-system-prompt-len", "20", "--gsp-question-len", "10",
]  # fmt: skip


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def _source(**kw: Any) -> PromptSource:
    ds = SharedPrefixDataset(**{"input_len": 30, "cache_hit_ratio": 2 / 3, "output_len": 8, **kw})
    return PromptSource(LoadSpec(base_url="http://x", dataset=ds, seed=3))


def test_prompts_per_group_makes_the_plan_and_num_prompts_gives_way() -> None:
    args = _args(*_GSP, "--gsp-num-groups", "3", "--gsp-prompts-per-group", "4", "--num-prompts", "100")
    spec = build_spec(args)
    assert spec.num_requests == 12  # groups x prompts per group, as bench_serving
    assert isinstance(spec.dataset, SharedPrefixDataset)
    assert spec.dataset.prompts_per_group == 4
    assert "--num-prompts is ignored with --gsp-prompts-per-group" in dataset_warnings(args)[0]
    assert dataset_warnings(_args(*_GSP, "--gsp-num-groups", "3", "--gsp-prompts-per-group", "4")) == []
    assert build_spec(_args(*_GSP, "--gsp-num-groups", "3", "--num-prompts", "7")).num_requests == 7


def test_the_plan_is_shuffled_unless_ordered() -> None:
    src = _source(num_groups=3, prompts_per_group=4)
    shuffled = [_group(next(src)) for _ in range(12)]
    assert Counter(shuffled) == {0: 4, 1: 4, 2: 4}
    assert shuffled != sorted(shuffled)
    ordered = _source(num_groups=3, prompts_per_group=4, ordered=True)
    assert [next(ordered).group for _ in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    # Without a plan: round-robin, as before these options.
    plain = _source(num_groups=3)
    assert [next(plain).group for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def _group(p: Prompt) -> int:
    assert p.group is not None
    return p.group


def _ids(p: Prompt) -> list[int]:
    assert isinstance(p.content, list)
    assert all(isinstance(t, int) for t in p.content)
    return [t for t in p.content if isinstance(t, int)]


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(len(x) for x in seqs)
    return next((k for k in range(n) if len({tuple(x[: k + 1]) for x in seqs}) > 1), n)


def test_range_ratio_draws_lengths_and_one_keeps_them_exact() -> None:
    src = _source(num_groups=3, range_ratio=0.5, output_len=16)  # token ids (native backend)
    prompts = [next(src) for _ in range(150)]
    assert all(isinstance(p.content, list) and len(p.content) == p.prompt_len for p in prompts)
    # Per group one prefix length in [10, 20]; per request a question in [5, 10], an output in [8, 16].
    prefixes = []
    for g in range(3):
        contents = [_ids(p) for p in prompts if p.group == g]
        prefixes.append(_common_prefix(contents))
    assert all(10 <= n <= 20 for n in prefixes)
    assert all(min(prefixes) + 5 <= p.prompt_len <= max(prefixes) + 10 for p in prompts)
    assert {p.output_len for p in prompts} <= set(range(8, 17))
    assert len({p.output_len for p in prompts}) > 4
    assert len({p.prompt_len for p in prompts}) > 4
    exact = _source(num_groups=3)  # bench_serving's default 1: exactly L
    assert {(p.prompt_len, p.output_len) for p in (next(exact) for _ in range(20))} == {(30, 8)}


def test_zipf_makes_group_0_the_hottest() -> None:
    src = _source(num_groups=4, zipf_alpha=2.0)
    counts = Counter(next(src).group for _ in range(2000))
    # p(rank) ~ rank**-2: 0.70, 0.18, 0.08, 0.04
    assert counts[0] > counts[1] > counts[2] > counts[3] > 0
    assert 0.62 < counts[0] / 2000 < 0.78
    # With a plan: groups x prompts_per_group draws (ordered: in draw order, not sorted).
    planned = _source(num_groups=4, zipf_alpha=2.0, prompts_per_group=50, ordered=True)
    groups = [_group(next(planned)) for _ in range(200)]
    assert Counter(groups)[0] > 100
    assert groups != sorted(groups)
    assert [next(planned).group for _ in range(200)] == groups  # the plan repeats


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gsp-group-distribution", "zipf"], "--gsp-group-distribution=zipf requires --gsp-zipf-alpha"),
        (["--gsp-zipf-alpha", "1.5"], "only meaningful with --gsp-group-distribution=zipf"),
        (["--gsp-group-distribution", "zipf", "--gsp-zipf-alpha", "0"], "finite float > 0"),
        (["--gsp-group-distribution", "zipf", "--gsp-zipf-alpha", "inf"], "finite float > 0"),
        (["--gsp-ordered"], "--gsp-ordered needs --gsp-prompts-per-group"),
    ],
)
def test_bad_gsp_options_exit_2(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as exc:
        build_spec(_args(*_GSP, *argv))
    assert exc.value.exit_code == 2
    assert message in str(exc.value)


@pytest.mark.parametrize(
    "flag",
    [
        ["--gsp-prompts-per-group", "2"],
        ["--gsp-range-ratio", "0.5"],
        ["--gsp-send-routing-key"],
        ["--gsp-ordered"],
        ["--gsp-group-distribution", "zipf"],
        ["--gsp-zipf-alpha", "1"],
    ],
)
def test_gsp_options_with_another_dataset_exit_2(flag: list[str]) -> None:
    with pytest.raises(CliError) as exc:
        build_spec(_args("--dataset-name", "random", *flag))
    assert exc.value.exit_code == 2
    assert f"{flag[0]}: need --dataset-name generated-shared-prefix" in str(exc.value)


async def _bench(*argv: str) -> int:
    return await asyncio.to_thread(main, ["bench", "--log-level", "error", "--disable-tqdm", *argv])


async def test_routing_key_header_per_group_on_every_turn(fake_sglang: Any, tmp_path: Path) -> None:
    fake = await fake_sglang()
    argv = [
        "--base-url", fake.base_url, "--backend", "sglang-oai-chat", *_GSP, "--gsp-output-len", "3",
        "--gsp-num-groups", "3", "--gsp-prompts-per-group", "2", "--gsp-num-turns", "2",
        "--gsp-send-routing-key", "--max-concurrency", "1",
    ]  # fmt: skip
    res = tmp_path / "res.jsonl"
    assert await _bench(*argv, "--output-file", str(res)) == 0
    record = json.loads(res.read_text(encoding="utf-8"))
    assert (record["gsp_prompts_per_group"], record["gsp_group_distribution"]) == (2, "uniform")
    assert record["completed"] == 12
    keys = [h.get("X-SMG-Routing-Key") for h in fake.request_headers]
    assert len(keys) == 3 + 3 * 2 * 2  # a warm-up request per group, then 6 conversations x 2 turns
    assert all(k is not None and re.fullmatch(r"[0-9a-f]{8}_\d{14}_[0-2]", k) for k in keys)
    assert len({k.rsplit("_", 1)[0] for k in keys if k}) == 1  # one run id
    by_key: dict[str, set[str]] = {}
    for key, body in zip(keys, fake.requests, strict=True):
        assert key is not None
        by_key.setdefault(key, set()).add(body["messages"][0]["content"].split("\n\n")[0])
    assert len(by_key) == 3
    assert all(len(prefixes) == 1 for prefixes in by_key.values())  # one key, one shared prefix
    measured = keys[3:]
    assert all(measured[k] == measured[k + 1] for k in range(0, 12, 2))  # both turns of a conversation
    assert Counter(measured) == dict.fromkeys(set(measured), 4)

    fake.request_headers.clear()
    assert await _bench(*argv[:-3], "--max-concurrency", "1") == 0
    assert all("X-SMG-Routing-Key" not in h for h in fake.request_headers)
