"""``sentinel bench``: one load run with bench_serving's flags, result block and JSONL.

Flags that bench_serving also has keep its names and meanings (`--backend`, `--num-prompts`,
`--request-rate`, `--random-range-ratio`...), so an operator's bench_serving command line works
after swapping the program name. Ours are added beside them (`--arrival`, `--duration`,
`--api-key-file`, `--cache-hit-ratio`, `--request-timeout`, `--output-csv`, `--output-html`,
`--gpu-energy`, `--gpus`, `--gpu-idle-seconds`).

Exit status: 0 when at least one request succeeded; 1 when none did (the message says why:
unreachable server, refused key, refused model...), 2 for bad usage, 130 when interrupted.
Results, partial or not, are written to `--output-file` (and `--output-csv`, `--output-html`)
in every case.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import signal
import sys
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sglang_sentinel.cli.bench_datasets import dataset_notes, dataset_warnings
from sglang_sentinel.cli.bench_fields import goodput_slos, logprob_body
from sglang_sentinel.cli.bench_flags import REJECTED_DATASETS, add_rejected_options, rejected_messages
from sglang_sentinel.cli.bench_outputs import check_outputs, write_reports
from sglang_sentinel.cli.bench_profile import add_profile_options, profile_plan
from sglang_sentinel.cli.bench_ramp import StepValues, format_ramp_summary, ramp_steps
from sglang_sentinel.cli.common import CliError, add_common_options, bounded, flag_error, ignoring_sighup
from sglang_sentinel.cli.gpu_energy import add_energy_options, open_energy
from sglang_sentinel.cli.target import API_KEY_ENVS, add_target_options, read_api_key, target_base_url
from sglang_sentinel.load.dataset_registry import DATASETS

if TYPE_CHECKING:
    from sglang_sentinel.collect.gpu.local import LocalEnergy
    from sglang_sentinel.load.result import RunResult
    from sglang_sentinel.load.spec import ArrivalProcess, LoadSpec
    from sglang_sentinel.load.torch_profile import ProfilePlan

_T = TypeVar("_T")

__all__ = ["build_spec", "register", "run_on_loop"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="run one load against an SGLang server and print bench_serving's result block",
        description="Run one calibrated load and report bench_serving-compatible figures (plus ours).",
    )
    add_common_options(p)
    g = p.add_argument_group("target")
    add_target_options(g, host="127.0.0.1", port=30000)
    g.add_argument("--model", default=None, help="OpenAI routes: model name (default: first of /v1/models)")
    g.add_argument(
        "--served-model-name", default=None, help="the model name sent in requests (default: --model)"
    )
    g.add_argument(
        "--header", action="extend", nargs="+", default=[], metavar="K=V", help="extra request header(s)"
    )
    g.add_argument(
        "--ready-check-timeout-sec",
        type=bounded(int, ge=0),
        default=60,
        help="wait up to this long for the server to answer before the run; 0: do not wait",
    )
    g.add_argument(
        "--extra-request-body", default=None, metavar="JSON", help="merged into every request body"
    )
    g.add_argument(
        "--request-timeout", type=bounded(float, gt=0), default=900.0, help="per-request limit, seconds"
    )
    g.add_argument(
        "--fake-prefill",
        action="store_true",
        help="decode-only run against a PD decode server: a fake KV transfer (bench_serving's)",
    )
    d = p.add_argument_group("dataset")
    d.add_argument(
        "--dataset-name",
        default="random",
        # The registry's names, in its order, then bench_serving's that sentinel bench refuses.
        choices=(*DATASETS.names, *REJECTED_DATASETS),
        help="the prompts to send (docs/bench.md, Datasets); a file dataset needs --dataset-path",
    )
    d.add_argument(
        "--dataset-path", type=Path, default=None, help="JSONL prompts (prompt|messages|input_ids)"
    )
    d.add_argument(
        "--num-prompts",
        type=bounded(int, ge=0),
        default=None,
        help="requests (default 1000, or none with --duration)",
    )
    d.add_argument("--seed", type=int, default=1)
    d.add_argument(
        "--tokenize-prompt",
        action="store_true",
        help="token ids, not text (what the native backend sends)",
    )
    d.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        metavar="PATH",
        help="local tokenizer.json (or a directory with one): retokenized output counts, trace prompt "
        "lengths; needs the tokenizers library; no hub download",
    )
    DATASETS.add_flags(p)  # each dataset's own flags, from its registry entry
    r = p.add_argument_group("request")
    r.add_argument("--temperature", type=bounded(float, ge=0), default=0.0)
    r.add_argument("--top-p", type=bounded(float, gt=0, le=1), default=1.0, help="sent only when < 1")
    r.add_argument("--return-logprob", action="store_true", help="native: return_logprob")
    r.add_argument("--top-logprobs-num", type=bounded(int, ge=0), default=0, help="with --return-logprob")
    r.add_argument(
        "--token-ids-logprob", type=int, nargs="+", default=None, help="native, with --return-logprob"
    )
    r.add_argument("--logprob-start-len", type=int, default=-1, help="native, with --return-logprob")
    r.add_argument("--lora-name", nargs="*", default=None, help="LoRA adapters, one per request")
    r.add_argument(
        "--lora-request-distribution", choices=("uniform", "distinct", "skewed"), default="uniform"
    )
    r.add_argument("--lora-zipf-alpha", type=bounded(float, gt=0), default=1.5, help="Zipf alpha for skewed")
    r.add_argument("--return-routed-experts", action="store_true", help="native: return_routed_experts")
    r.add_argument(
        "--print-requests",
        action="store_true",
        help="sglang-oai-chat: a line on stdout as each request starts and ends",
    )
    a = p.add_argument_group("arrivals")
    a.add_argument(
        "--request-rate",
        type=bounded(float, gt=0),
        nargs="+",
        action=StepValues,
        default=math.inf,
        help="req/s; inf sends all at once; several values: one run per value (a ramp)",
    )
    a.add_argument(
        "--arrival",
        choices=("poisson", "constant", "burst", "closed"),
        default=None,
        help="default: poisson with a finite rate, else burst (closed with --duration)",
    )
    a.add_argument(
        "--exact-rate",
        action="store_true",
        help="poisson with --num-prompts: rescale the gaps to average exactly 1/rate (default: free draws)",
    )
    a.add_argument(
        "--max-concurrency",
        type=bounded(int, ge=1),
        nargs="+",
        action=StepValues,
        default=None,
        help="requests in flight at most; several values: one run per value (a ramp)",
    )
    a.add_argument(
        "--duration", type=bounded(float, gt=0), default=None, help="stop sending after this many seconds"
    )
    a.add_argument("--warmup-requests", type=bounded(int, ge=0), default=1)
    a.add_argument("--disable-stream", action="store_true")
    a.add_argument("--disable-ignore-eos", action="store_true")
    o = p.add_argument_group("output")
    o.add_argument("--output-file", type=Path, default=None, help="append one JSON line with the results")
    o.add_argument("--output-details", action="store_true", help="add per-request arrays to --output-file")
    o.add_argument(
        "--output-csv", type=Path, default=None, metavar="FILE", help="write one CSV row per request"
    )
    o.add_argument(
        "--output-html",
        type=Path,
        default=None,
        metavar="FILE",
        help="write an HTML report with plots (needs the report extra: matplotlib)",
    )
    o.add_argument("--tag", default=None)
    o.add_argument("--disable-tqdm", action="store_true", help="no live progress line")
    o.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before the run")
    o.add_argument(
        "--flush-cache-timeout", type=bounded(float, gt=0), default=30.0, help="seconds to wait for the flush"
    )
    o.add_argument(
        "--goodput",
        nargs="+",
        default=None,
        metavar="KEY:MS",
        help="SLOs for goodput, KEY in ttft, tpot, e2el, e.g. --goodput ttft:500 tpot:50",
    )
    o.add_argument("--cache-report", action="store_true", help="print Cache Hit Details")
    o.add_argument(
        "--plot-throughput", action="store_true", help="plot output tokens/s and requests per second (text)"
    )
    add_profile_options(p)
    # 5 s: short beside a run, long beside the counter's 1 mJ resolution and the driver's update interval.
    add_energy_options(p, idle_default=5.0)
    add_rejected_options(p)
    p.set_defaults(handler=_handle)


def build_spec(args: argparse.Namespace) -> LoadSpec:
    """The LoadSpec an argument namespace describes; `CliError` (exit 2) for bad usage."""
    from sglang_sentinel.load.chat_template import load_chat_template
    from sglang_sentinel.load.spec import ArrivalProcess, Backend, LoadSpec, SpecError
    from sglang_sentinel.load.tokenizer import load_tokenizer

    refused = rejected_messages(args)
    if args.dataset_name in REJECTED_DATASETS:
        refused.append(f"--dataset-name {args.dataset_name}: {REJECTED_DATASETS[args.dataset_name]}")
    if refused:
        raise CliError("bench_serving flags not supported by sentinel bench:\n  " + "\n  ".join(refused), 2)
    try:
        DATASETS.check_args(args)  # each dataset's flags given with another: exit 2
    except SpecError as exc:
        raise flag_error(str(exc)) from None
    if args.print_requests and args.backend not in ("sglang-oai-chat", "vllm-chat", "lmdeploy-chat", "chat"):
        # bench_serving asserts the same (its other request functions do not print).
        raise CliError("--print-requests needs --backend sglang-oai-chat (as bench_serving)", 2)
    headers: dict[str, str] = {}
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--header expects K=V, got {item!r}", 2)
        headers[key.strip()] = value.strip()
    extra: dict[str, Any] = {}
    if args.extra_request_body:
        try:
            extra = json.loads(args.extra_request_body)
        except json.JSONDecodeError as exc:
            raise CliError(f"--extra-request-body is not JSON: {exc.msg}", 2) from None
        if not isinstance(extra, dict):
            raise CliError("--extra-request-body must be a JSON object", 2)
    if args.fake_prefill:
        # bench_serving's: SGLang's FAKE_BOOTSTRAP_HOST (srt/disaggregation/utils.py) marks a
        # transfer the decode server fakes; these two win over --extra-request-body's.
        extra |= {"bootstrap_host": "2.2.2.2", "bootstrap_room": 0}
    rate = args.request_rate
    if args.arrival is not None:
        arrival = ArrivalProcess(args.arrival)
    elif math.isfinite(rate):
        arrival = ArrivalProcess.POISSON
    elif args.duration is not None and args.max_concurrency is not None:
        arrival = ArrivalProcess.CLOSED
    else:
        arrival = ArrivalProcess.BURST
    base_url = target_base_url(args, "127.0.0.1", 30000)
    try:
        backend = Backend.parse(args.backend)
        # Checked now (exit 2 before the run): a local file, and the library installed.
        tokenizer = None if args.tokenizer is None else load_tokenizer(args.tokenizer).path
        if args.apply_chat_template and tokenizer is not None:
            load_chat_template(tokenizer)  # a template there, jinja2 installed, and it compiles
        built = DATASETS.entry(args.dataset_name).from_args(args, backend)
        num = args.num_prompts if built.requests is None else built.requests
        arrival = arrival if built.arrival is None else built.arrival
        if num is None and args.duration is None:
            num = 1000  # bench_serving's default
        return LoadSpec(
            base_url=base_url,
            backend=backend,
            dataset=built.dataset,
            arrival=arrival,
            request_rate=rate,
            max_concurrency=args.max_concurrency,
            num_requests=num,
            duration_s=args.duration,
            warmup_requests=args.warmup_requests,
            seed=args.seed,
            exact_rate=args.exact_rate,
            model=args.served_model_name or args.model,
            api_key=read_api_key(args.api_key_file),
            headers=headers,
            extra_body={**logprob_body(args, backend), **extra},
            temperature=args.temperature,
            top_p=args.top_p,
            lora_names=tuple(args.lora_name or ()),
            lora_distribution=args.lora_request_distribution,
            lora_zipf_alpha=args.lora_zipf_alpha,
            goodput_slos_ms=goodput_slos(args.goodput),
            ready_timeout_s=float(max(args.ready_check_timeout_sec, 0)),
            ignore_eos=not args.disable_ignore_eos,
            stream=not args.disable_stream,
            request_timeout_s=args.request_timeout,
            keep_text=args.output_details,
            print_requests=args.print_requests,
            tokenizer=tokenizer,
        )
    except SpecError as exc:
        raise flag_error(str(exc)) from None


def _handle(args: argparse.Namespace) -> int:
    with ignoring_sighup():
        return _bench_command(args)


def _bench_command(args: argparse.Namespace) -> int:
    from sglang_sentinel.config import load_settings
    from sglang_sentinel.log import configure_logging

    settings = load_settings(args.config)
    configure_logging(args.log_level or settings.log.level, args.log_format or settings.log.format)
    steps = ramp_steps(args)
    if steps:
        return _ramp(steps, settings)
    spec = build_spec(args)
    profile = profile_plan(args)
    check_outputs(args)
    for warning in dataset_warnings(args):
        print(f"sentinel bench: {warning}", file=sys.stderr)
    for line in dataset_notes(args):
        print(line, flush=True)
    show_progress = sys.stderr.isatty() and not args.disable_tqdm
    flush = args.flush_cache_timeout if args.flush_cache else None
    energy = open_energy(args, settings, spec.base_url, "sentinel bench")
    try:
        main = _bench(spec, show_progress, flush, profile, energy, args.gpu_idle_seconds)
        result, interrupted = run_on_loop(main, spec.arrival)
    finally:
        energy.close()
    return _report(args, result, interrupted)


def _ramp(steps: list[tuple[str, argparse.Namespace]], settings: Any) -> int:
    """One run per step (`sglang_sentinel.cli.bench_ramp`), then the summary; stops at a failed step."""
    specs = [(label, ns, build_spec(ns)) for label, ns in steps]  # every step checked first
    profile = profile_plan(steps[0][1])  # the same flags in every step; each step is profiled
    for _, ns in steps:
        check_outputs(ns)
    for warning in dataset_warnings(steps[0][1]):
        print(f"sentinel bench: {warning}", file=sys.stderr)
    for line in dataset_notes(steps[0][1]):
        print(line, flush=True)
    done: list[tuple[str, RunResult]] = []
    code = 0
    # One meter for the whole ramp: the idle draw is measured before the first step only (as the
    # warm-up runs), and every step's figures take it as their baseline.
    energy = open_energy(steps[0][1], settings, specs[0][2].base_url, "sentinel bench")
    try:
        for k, (label, ns, spec) in enumerate(specs, 1):
            print(f"\nRamp step {k}/{len(specs)}: {label}", flush=True)
            show_progress = sys.stderr.isatty() and not ns.disable_tqdm
            flush = ns.flush_cache_timeout if ns.flush_cache else None
            idle = ns.gpu_idle_seconds if k == 1 else 0.0
            main = _bench(spec, show_progress, flush, profile, energy, idle)
            result, interrupted = run_on_loop(main, spec.arrival)
            if not result.warmup_failed:
                done.append((label, result))
            code = _report(ns, result, interrupted)
            if code:
                break
    finally:
        energy.close()
        if done:
            print(format_ramp_summary(done), flush=True)
    return code


def run_on_loop(main: Coroutine[Any, Any, _T], arrival: ArrivalProcess) -> _T:
    """Run `main` on the event loop that suits `arrival`, as `sentinel bench` does.

    The event loop follows the arrival process. Measured on the simulator, same run
    (`benchmarks/load_efficiency.py`, `benchmarks/load_accuracy.py --pin`): uvloop costs about 14 %
    less client CPU per streamed token, but under load it wakes timers late (libuv computes the
    poll timeout from the time cached at the start of the iteration), and a Poisson schedule's
    p99 lag was 4.7 ms on it against 0.86 ms on asyncio's own loop. So scheduled arrivals
    (Poisson, constant rate, a trace's timestamps) run on asyncio's loop, unscheduled ones (all
    at once, closed loop: nothing to be late for) on uvloop when installed."""
    from sglang_sentinel.load.spec import ArrivalProcess

    if arrival in (ArrivalProcess.POISSON, ArrivalProcess.CONSTANT, ArrivalProcess.TRACE):
        return asyncio.run(main)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


async def _bench(
    spec: LoadSpec,
    show_progress: bool,
    flush_timeout: float | None,
    profile: ProfilePlan | None = None,
    energy: LocalEnergy | None = None,
    idle_seconds: float = 0.0,
) -> tuple[RunResult, bool]:
    from sglang_sentinel.load.bench import run_bench
    from sglang_sentinel.load.progress import ProgressLine
    from sglang_sentinel.load.records import LoadCounters

    cancel = asyncio.Event()
    interrupted = False
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = True
        cancel.set()

    handled: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Not possible outside the main thread (embedding, tests); Ctrl-C then ends the run
        # through KeyboardInterrupt instead of returning partial results.
        with contextlib.suppress(RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            handled.append(sig)
    counters = LoadCounters()
    progress = None
    if show_progress:
        progress = ProgressLine(counters, sys.stderr, planned=spec.num_requests, duration_s=spec.duration_s)
    result: RunResult | None = None
    # Log lines go above the progress line until it is replaced by the summary.
    with progress.logs_above() if progress is not None else contextlib.nullcontext():
        drawing = asyncio.create_task(progress.run()) if progress is not None else None
        try:
            result = await run_bench(
                spec,
                flush_timeout_s=flush_timeout,
                profile=profile,
                counters=counters,
                on_record=progress.on_record if progress is not None else None,
                cancel=cancel,
                energy=energy.meter if energy is not None else None,
                idle_seconds=idle_seconds,
            )
            if energy is not None and energy.meter is None and energy.note:
                result.energy_note = energy.note
            return result, interrupted
        finally:
            if progress is not None and drawing is not None:
                drawing.cancel()
                # A bug in the drawing must not cost the run's results: its exception is dropped.
                await asyncio.gather(drawing, return_exceptions=True)
                # Written before the result block (stdout), which then starts on a line of its own.
                progress.finish(result)
            for sig in handled:
                loop.remove_signal_handler(sig)


def _failure_message(result: RunResult) -> str:
    """Why nothing succeeded, in the operator's words."""
    records = result.records if result.warmup_failed else result.measured
    failed = [r for r in records if not r.success and r.failure]
    if not failed:
        return "no request was sent"
    reason, _ = Counter(r.failure for r in failed).most_common(1)[0]
    example = next(r for r in failed if r.failure == reason)
    error = example.error or reason
    spec = result.spec
    phase = "every warm-up request" if result.warmup_failed else f"all {len(failed)} requests"
    if reason == "connect_error":
        return f"cannot reach the server at {spec.base_url}: {error}"
    if reason in ("http_401", "http_403"):
        source = "--api-key-file" if spec.api_key else f"no key was given (${' / $'.join(API_KEY_ENVS)})"
        return f"the server refused the API key ({error}); {source}"
    if reason in ("http_400", "http_404", "http_422") and result.model:
        return f"the server refused the request for model {result.model!r}: {error}"
    return f"{phase} failed ({reason}): {error}"


def _report(args: argparse.Namespace, result: RunResult, interrupted: bool) -> int:
    from sglang_sentinel.load.report import format_result_block

    m = result.metrics
    if not result.warmup_failed:
        if args.plot_throughput:
            from sglang_sentinel.cli.bench_plot import throughput_plots

            print(throughput_plots(result), flush=True)  # before the block, as bench_serving
        print(format_result_block(result, cache_report=args.cache_report), flush=True)
    if args.output_file is not None:
        record = result.to_dict(details=args.output_details)
        record["tag"] = args.tag
        if getattr(args, "ramp_step", None) is not None:
            record["ramp_step"] = args.ramp_step
        try:
            with args.output_file.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
        except OSError as exc:
            raise CliError(f"cannot write --output-file {args.output_file}: {exc.strerror}") from None
    write_reports(args, result)
    if result.client_bound:
        # With kernel receive stamps the client's delays stay out of the latencies; what it
        # still changes is when requests went out (the load offered).
        effect = (
            "requests went out later than planned (latencies are kernel-stamped and hold none of its delay)"
            if result.kernel_timestamps
            else "latencies include its own delay"
        )
        print(
            f"sentinel bench: warning: the client was the bottleneck ({'; '.join(m.client_bound_reasons)}); "
            + effect,
            file=sys.stderr,
        )
    if interrupted:
        shown = "partial results above" if not result.warmup_failed else "stopped during warm-up, no results"
        print(f"sentinel bench: interrupted; {shown}", file=sys.stderr)
        return 130
    if result.warmup_failed or m.completed == 0:
        raise CliError(_failure_message(result))
    return 0
