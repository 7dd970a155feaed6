"""`sentinel bench`'s generated-shared-prefix and agentic-trace flags, and the datasets they make;
the prompt-shaping flags (--prompt-suffix, --apply-chat-template) and --print-requests.

Same names and meanings as bench_serving 0.5.23 (`datasets/generated_shared_prefix.py`,
`datasets/agentic_trace.py`, `datasets/sharegpt.py`, `_validate_parsed_gsp_args` in `serving.py`).
A flag given for a dataset that bench_serving would ignore it for exits 2. One difference, kept
from before these flags: without `--gsp-prompts-per-group` the request count is `--num-prompts`
(round-robin over the groups); with it, as bench_serving, it is groups x prompts per group and
`--num-prompts` is ignored (a warning says so).
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from sglang_sentinel.cli.common import CliError, bounded

if TYPE_CHECKING:
    from sglang_sentinel.load.spec import AgenticTraceDataset, SharedPrefixDataset

__all__ = [
    "add_dataset_options",
    "agentic_dataset",
    "check_dataset_flags",
    "dataset_notes",
    "dataset_warnings",
    "shared_prefix_dataset",
]


def add_dataset_options(d: argparse._ArgumentGroup) -> None:
    d.add_argument(
        "--dataset-offset",
        type=bounded(int, ge=0),
        default=0,
        help="agentic-trace: rotate the conversation list by this many entries first",
    )
    d.add_argument(
        "--agentic-max-turns",
        type=bounded(int, ge=1),
        default=None,
        help="agentic-trace: at most this many turns each",
    )
    d.add_argument(
        "--gsp-prompts-per-group",
        type=bounded(int, ge=1),
        default=None,
        help="generated-shared-prefix: groups x this many requests, --num-prompts ignored "
        "(default: --num-prompts round-robin over the groups)",
    )
    d.add_argument(
        "--gsp-range-ratio",
        type=bounded(float, ge=0, le=1),
        default=1.0,
        help="generated-shared-prefix: lengths uniform in [L x ratio, L]; 1 (default): exactly L",
    )
    d.add_argument(
        "--gsp-send-routing-key",
        action="store_true",
        help="generated-shared-prefix: X-SMG-Routing-Key header, one key per group",
    )
    d.add_argument(
        "--gsp-ordered",
        action="store_true",
        help="with --gsp-prompts-per-group: group by group, not shuffled",
    )
    d.add_argument(
        "--prompt-suffix",
        default="",
        help='sharegpt, custom: appended to each prompt, before a closing "Assistant:" (as bench_serving)',
    )
    d.add_argument(
        "--apply-chat-template",
        action="store_true",
        help="sharegpt, custom: render each prompt with the --tokenizer directory's chat template "
        "(needs jinja2: the tokenizer extra)",
    )
    d.add_argument(
        "--print-requests",
        action="store_true",
        help="sglang-oai-chat: a line on stdout as each request starts and ends",
    )
    d.add_argument("--gsp-group-distribution", choices=("uniform", "zipf"), default="uniform")
    d.add_argument(
        "--gsp-zipf-alpha", type=float, default=None, help="zipf: p(rank) ~ rank**-alpha, group 0 hottest"
    )


def _gsp_only(args: argparse.Namespace) -> list[str]:
    given = {
        "--gsp-prompts-per-group": args.gsp_prompts_per_group is not None,
        "--gsp-range-ratio": args.gsp_range_ratio != 1.0,
        "--gsp-send-routing-key": args.gsp_send_routing_key,
        "--gsp-ordered": args.gsp_ordered,
        "--gsp-group-distribution": args.gsp_group_distribution != "uniform",
        "--gsp-zipf-alpha": args.gsp_zipf_alpha is not None,
    }
    return [flag for flag, on in given.items() if on]


def check_dataset_flags(args: argparse.Namespace) -> None:
    """Flags given for a dataset they do nothing for: exit 2 rather than a silent no-op."""
    if args.dataset_name != "generated-shared-prefix" and _gsp_only(args):
        raise CliError(f"{', '.join(_gsp_only(args))}: need --dataset-name generated-shared-prefix", 2)
    # bench_serving applies both in its sharegpt and custom datasets only.
    text_datasets = ("sharegpt", "custom", "jsonl")
    for flag, on in (
        ("--prompt-suffix", bool(args.prompt_suffix)),
        ("--apply-chat-template", args.apply_chat_template),
    ):
        if on and args.dataset_name not in text_datasets:
            raise CliError(f"{flag} applies to --dataset-name sharegpt or custom (as bench_serving)", 2)
    if args.apply_chat_template and args.tokenizer is None:
        raise CliError(
            "--apply-chat-template needs --tokenizer: a local directory (or its tokenizer.json) with the "
            "model's chat template (tokenizer_config.json 'chat_template', or chat_template.jinja)",
            2,
        )
    if args.print_requests and args.backend not in ("sglang-oai-chat", "vllm-chat", "lmdeploy-chat", "chat"):
        # bench_serving asserts the same (its other request functions do not print).
        raise CliError("--print-requests needs --backend sglang-oai-chat (as bench_serving)", 2)
    if args.dataset_name != "agentic-trace":
        for flag, on in (
            ("--dataset-offset", args.dataset_offset != 0),
            ("--agentic-max-turns", args.agentic_max_turns is not None),
        ):
            if on:
                # bench_serving 0.5.23 reads it in the agentic-trace dataset only.
                raise CliError(f"{flag} needs --dataset-name agentic-trace (the one dataset reading it)", 2)


def shared_prefix_dataset(args: argparse.Namespace) -> tuple[SharedPrefixDataset, int | None]:
    """The dataset and its request count (None: --num-prompts decides)."""
    from sglang_sentinel.load.spec import SharedPrefixDataset

    if args.gsp_system_prompt_len is not None or args.gsp_question_len is not None:
        sys_len = args.gsp_system_prompt_len or 0
        q_len = args.gsp_question_len or 1
        input_len, ratio = sys_len + q_len, sys_len / (sys_len + q_len)
    else:
        input_len, ratio = args.random_input_len, args.cache_hit_ratio
    if args.tokenize_prompt and args.gsp_num_turns > 1:
        raise CliError("--tokenize-prompt requires --gsp-num-turns=1 (as bench_serving)", 2)
    alpha = args.gsp_zipf_alpha
    # bench_serving's _validate_parsed_gsp_args.
    if args.gsp_group_distribution == "zipf" and alpha is None:
        raise CliError("--gsp-group-distribution=zipf requires --gsp-zipf-alpha (a finite float > 0)", 2)
    if args.gsp_group_distribution == "uniform" and alpha is not None:
        raise CliError(
            "--gsp-zipf-alpha is only meaningful with --gsp-group-distribution=zipf; remove "
            "--gsp-zipf-alpha or set --gsp-group-distribution=zipf",
            2,
        )
    if alpha is not None and not (alpha > 0 and math.isfinite(alpha)):
        raise CliError(f"--gsp-zipf-alpha must be a finite float > 0, got {alpha}", 2)
    per_group = args.gsp_prompts_per_group
    if args.gsp_ordered and per_group is None:
        raise CliError(
            "--gsp-ordered needs --gsp-prompts-per-group: without it requests already go "
            "round-robin over the groups, unshuffled",
            2,
        )
    ds = SharedPrefixDataset(
        input_len=input_len,
        output_len=args.gsp_output_len or args.random_output_len,
        cache_hit_ratio=ratio,
        num_groups=args.gsp_num_groups,
        num_turns=args.gsp_num_turns,
        prompts_per_group=per_group,
        ordered=args.gsp_ordered,
        range_ratio=args.gsp_range_ratio,
        zipf_alpha=alpha,
        routing_key=args.gsp_send_routing_key,
    )
    return ds, None if per_group is None else ds.num_groups * per_group


def agentic_dataset(args: argparse.Namespace) -> tuple[AgenticTraceDataset, int]:
    """The dataset and its conversation count; the whole file is checked here (exit 2)."""
    from sglang_sentinel.load.agentic import load_agentic
    from sglang_sentinel.load.spec import AgenticTraceDataset

    if args.dataset_path is None:
        raise CliError(
            "--dataset-name agentic-trace needs --dataset-path  (sentinel bench downloads nothing)", 2
        )
    if not args.dataset_path.is_file():
        raise CliError(f"dataset file not found: {args.dataset_path}", 2)
    if args.agentic_max_turns is not None and args.agentic_max_turns < 1:
        raise CliError(f"--agentic-max-turns must be >= 1, got {args.agentic_max_turns}", 2)
    num = 1000 if args.num_prompts is None else args.num_prompts  # bench_serving's default
    ds = AgenticTraceDataset(
        args.dataset_path,
        max_conversations=num if num > 0 else None,  # bench_serving: <= 0 keeps them all
        output_len=args.sharegpt_output_len or 220,
        offset=args.dataset_offset,
        max_turns=args.agentic_max_turns,
    )
    prompts, _ = load_agentic(ds)
    return ds, len(prompts)


def dataset_notes(args: argparse.Namespace) -> list[str]:
    """What bench_serving prints about the dataset it loaded (agentic-trace), same wording."""
    if args.dataset_name != "agentic-trace":
        return []
    from sglang_sentinel.load.agentic import load_agentic, summary_lines

    ds, _ = agentic_dataset(args)
    prompts, offset = load_agentic(ds)
    return summary_lines(prompts, offset, ds.output_len)


def dataset_warnings(args: argparse.Namespace) -> list[str]:
    """What bench_serving ignores and sentinel bench too, or does otherwise, said on stderr."""
    if args.dataset_name == "mooncake" and args.tokenizer is not None:
        from sglang_sentinel.load.chat_template import load_chat_template
        from sglang_sentinel.load.spec import SpecError

        try:
            load_chat_template(args.tokenizer)
        except SpecError as exc:
            if "needs the jinja2 library" in str(exc):  # a template bench_serving would render
                return [
                    f"{args.tokenizer} has a chat template but jinja2 is not installed: the mooncake "
                    "prompts are bench_serving's 'role: content' fallback (pip install "
                    "'sglang-sentinel[tokenizer]')"
                ]
    per_group = args.gsp_prompts_per_group
    if args.dataset_name != "generated-shared-prefix" or per_group is None or args.num_prompts is None:
        return []
    if args.num_prompts == args.gsp_num_groups * per_group:
        return []
    return [
        "--num-prompts is ignored with --gsp-prompts-per-group: the run sends --gsp-num-groups x "
        "--gsp-prompts-per-group requests (as bench_serving)"
    ]
