"""``sentinel sweep``: find the server's throughput ceiling, knee and SLO capacity.

Defaults come from the ``[calibration]`` section; flags override them for one run. The target
defaults to ``[server]`` host/port/api_key. The result is printed (``--output-file`` for its JSON);
it is stored in a state directory only when asked: ``--save`` (the state directory the daemon
would use) or ``--state-dir DIR``. A state directory held by a running daemon gets a warning: the
result is stored with its target (the URL), and the daemon loads only results of its own server
and launch config. The result is compared with the newest stored result of the same URL, read
from that directory (or the default one) when there is one; reading never writes.

Exit status: 0 a ceiling was measured; 1 no step could be trusted (server unreachable, every
request failed, client-bound from the first step); 2 bad usage; 3 a regression was flagged and
``--fail-on-regression`` was given; 130 interrupted (the partial result is still saved/printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_sentinel.calibrate.model import CalibrationResult
    from sglang_sentinel.calibrate.settings import CalibrationSettings

from sglang_sentinel.cli.common import CliError, add_common_options, bounded, flag_error, ignoring_sighup
from sglang_sentinel.cli.gpu_energy import add_energy_options, open_energy
from sglang_sentinel.cli.target import add_target_options, read_api_key, target_base_url

__all__ = ["format_summary", "register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "sweep",
        help="find the throughput ceiling, the knee and the SLO capacity with an adaptive load sweep",
        description="Adaptive calibration sweep: geometric escalation, bisection, SLO and budget stops.",
    )
    add_common_options(p)
    g = p.add_argument_group("target (default: the [server] section)")
    add_target_options(g, key_fallback="[server] api_key")
    w = p.add_argument_group("workload (default: [calibration])")
    w.add_argument("--random-input-len", type=bounded(int, ge=1), default=None)
    w.add_argument("--random-output-len", type=bounded(int, ge=1), default=None)
    w.add_argument(
        "--random-range-ratio",
        type=bounded(float, ge=0, le=1),
        default=None,
        help="0: uniform [1, L]; 1: exactly L",
    )
    w.add_argument("--seed", type=int, default=None)
    s = p.add_argument_group("search")
    s.add_argument("--start-concurrency", type=bounded(int, ge=1), default=None)
    s.add_argument("--max-concurrency", type=bounded(int, ge=1), default=None)
    s.add_argument("--growth-factor", type=bounded(float, gt=1), default=None)
    s.add_argument(
        "--max-requests", type=bounded(int, ge=1), default=None, help="request budget of the whole sweep"
    )
    s.add_argument("--max-duration", type=bounded(float, gt=0), default=None, help="time budget, seconds")
    s.add_argument(
        "--metrics-interval",
        type=bounded(float, gt=0),
        default=None,
        help="server /metrics sampling period, s",
    )
    s.add_argument(
        "--incremental",
        action="store_true",
        help="re-probe around the newest stored result (or --seed-result) instead of a full sweep",
    )
    s.add_argument("--seed-result", type=Path, default=None, help="result JSON to seed --incremental from")
    slo = p.add_argument_group("SLO (seconds; unset limits are not checked)")
    slo.add_argument("--slo-ttft", type=bounded(float, gt=0), default=None)
    slo.add_argument("--slo-tpot", type=bounded(float, gt=0), default=None)
    slo.add_argument("--slo-e2e", type=bounded(float, gt=0), default=None)
    slo.add_argument(
        "--slo-percentile", type=int, choices=(50, 90, 95, 99), default=None, help="for all three limits"
    )
    slo.add_argument("--max-error-ratio", type=bounded(float, ge=0, le=1), default=None)
    slo.add_argument("--stop-at-slo", action="store_true", help="stop escalating at the first SLO violation")
    o = p.add_argument_group("output")
    o.add_argument("--report", type=Path, default=None, metavar="DIR", help="write an HTML report with plots")
    o.add_argument("--output-file", type=Path, default=None, help="write the result JSON here")
    o.add_argument(
        "--save", action="store_true", help="store the result in the state directory (state_dir or default)"
    )
    o.add_argument(
        "--state-dir", type=Path, default=None, help="store the result in (and compare with) this directory"
    )
    o.add_argument(
        "--no-save", action="store_true", help="do not store the result (the default; kept for scripts)"
    )
    o.add_argument("--fail-on-regression", action="store_true", help="exit 3 when a regression is flagged")
    # 10 s, once before the first step: a sweep runs for minutes, and this is [energy]'s shortest gap.
    add_energy_options(p, idle_default=10.0)
    p.set_defaults(handler=_handle)


def _overridden(base: CalibrationSettings, args: argparse.Namespace) -> CalibrationSettings:
    from pydantic import ValidationError

    from sglang_sentinel.calibrate.settings import CalibrationSettings

    top = {
        "input_len": args.random_input_len,
        "output_len": args.random_output_len,
        "range_ratio": args.random_range_ratio,
        "seed": args.seed,
        "start_concurrency": args.start_concurrency,
        "max_concurrency": args.max_concurrency,
        "growth_factor": args.growth_factor,
        "max_requests": args.max_requests,
        "max_duration": args.max_duration,
        "metrics_interval": args.metrics_interval,
    }
    data = base.model_dump()
    data.update({k: v for k, v in top.items() if v is not None})
    if args.stop_at_slo:
        data["stop_at_slo"] = True
    slo = dict(data["slo"])
    for key, value in (
        ("ttft_seconds", args.slo_ttft),
        ("tpot_seconds", args.slo_tpot),
        ("e2e_seconds", args.slo_e2e),
        ("max_error_ratio", args.max_error_ratio),
    ):
        if value is not None:
            slo[key] = value
    if args.slo_percentile is not None:
        for key in ("ttft_percentile", "tpot_percentile", "e2e_percentile"):
            slo[key] = args.slo_percentile
    data["slo"] = slo
    try:
        return CalibrationSettings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CliError(f"invalid option ({where}): {err['msg']}", 2) from None


def _value(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def format_summary(result: CalibrationResult) -> str:
    rows = [
        ("Mode:", result.mode),
        ("Stopped because:", result.stop_reason),
        ("Steps / requests:", f"{len(result.steps)} / {result.requests_spent}"),
        ("Duration (s):", f"{result.duration:.2f}"),
        ("Saturation output throughput (tok/s):", _value(result.saturation_output_throughput.value, ".2f")),
        ("Saturation total throughput (tok/s):", _value(result.saturation_total_throughput.value, ".2f")),
        ("Knee concurrency:", _value(result.knee_concurrency.value, ".0f")),
        ("Max concurrency within SLO:", _value(result.max_concurrency_within_slo.value, ".0f")),
        ("Max request rate within SLO (req/s):", _value(result.max_rate_within_slo.value, ".3f")),
        ("Goodput (req/s):", _value(result.goodput.value, ".3f")),
    ]
    efficient = result.efficient_step
    if efficient is not None and efficient.measurement.energy is not None:
        e = efficient.measurement.energy
        rows.append(("Fewest GPU J per output token at:", f"c={efficient.concurrency}"))
        rows.append(("  GPU energy per output token (J):", _value(e.joules_per_output_token, ".4f")))
        if result.knee_tokens_per_joule is not None:
            rows.append(("  Output tokens per J at the knee:", _value(result.knee_tokens_per_joule, ".3f")))
    lines = ["{s:{c}^{n}}".format(s=" Calibration Result ", n=60, c="=")]
    lines += [f"{k:<44}{v:>16}" for k, v in rows]
    lines.append(f"  ceiling: {result.saturation_output_throughput.note}")
    lines.append(f"  knee: {result.knee_concurrency.note}")
    lines.append(f"  SLO: {result.max_concurrency_within_slo.note}")
    if result.comparison is not None:
        c = result.comparison
        if c.regressions:
            lines += [f"REGRESSION: {r}" for r in c.regressions]
        else:
            changes = ", ".join(f"{k} {v:+.1%}" for k, v in c.changes.items())
            lines.append(
                f"No regression against {c.baseline_started_at.isoformat(timespec='seconds')}: {changes}"
            )
    lines += [f"warning: {w}" for w in result.warnings]
    lines.append("=" * 60)
    return "\n".join(lines)


def _handle(args: argparse.Namespace) -> int:
    with ignoring_sighup():
        return _sweep_command(args)


def _sweep_command(args: argparse.Namespace) -> int:
    from pydantic import SecretStr

    from sglang_sentinel.calibrate.api import base_spec, store_for
    from sglang_sentinel.calibrate.model import Target
    from sglang_sentinel.calibrate.report import ReportError, write_report
    from sglang_sentinel.calibrate.runner import LoadStepRunner
    from sglang_sentinel.calibrate.store import StoreError, compare, load_result
    from sglang_sentinel.config import load_settings, resolve_state_dir
    from sglang_sentinel.load import SpecError
    from sglang_sentinel.log import configure_logging
    from sglang_sentinel.reportkit import require_matplotlib
    from sglang_sentinel.statedir import lock_holder

    settings = load_settings(args.config)
    configure_logging(args.log_level or settings.log.level, args.log_format or settings.log.format)
    cal = _overridden(settings.calibration, args)
    base_url = target_base_url(args, settings.server.host, settings.server.port)
    configured = settings.server.api_key
    if isinstance(configured, SecretStr):
        configured = configured.get_secret_value()
    api_key = read_api_key(args.api_key_file, configured)
    if args.report is not None:
        # Before any load is sent: finding out after an hour-long sweep would waste it.
        try:
            require_matplotlib("--report")
        except ReportError as exc:
            raise CliError(str(exc), 2) from None
    # --state-dir DIR --no-save: compare with (or seed from) DIR's results, store nothing.
    save = (args.save or args.state_dir is not None) and not args.no_save
    state_dir = args.state_dir or resolve_state_dir(settings, os.environ)
    # The URL only: a sweep knows neither the daemon's launch hash nor (reliably) the served model.
    store = store_for(state_dir, cal, Target(url=base_url))
    if save:
        holder = lock_holder(state_dir)
        if holder is not None:
            print(
                f"sentinel sweep: warning: {state_dir} belongs to a running sentinel daemon"
                + (f" (pid {holder})" if holder else "")
                + f"; the result is stored there marked with its target {base_url}, and the daemon "
                "uses only results of its own server and launch config",
                file=sys.stderr,
            )
    previous = None
    if args.seed_result is not None:
        if not args.incremental:
            raise CliError("--seed-result needs --incremental", 2)
        try:
            previous = load_result(args.seed_result)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
    elif args.incremental:
        previous = store.latest()
        if previous is None:
            print(f"no stored result in {store.directory}: running a full sweep", file=sys.stderr)
    try:
        spec = base_spec(cal, base_url, args.backend, api_key)
    except SpecError as exc:
        raise flag_error(str(exc)) from None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    energy = open_energy(args, settings, base_url, "sentinel sweep")
    if energy.meter is None and energy.note:
        # Before the sweep: its live progress line owns the terminal from then on.
        print(f"sentinel sweep: GPU energy not measured: {energy.note}", file=sys.stderr)
    try:
        runner = LoadStepRunner(
            spec, cal, metrics_headers=headers, energy=energy.meter, idle_seconds=args.gpu_idle_seconds
        )
        result, interrupted = asyncio.run(_run(cal, base_url, args.backend, api_key, previous, runner))
    finally:
        energy.close()
    if runner.metrics_note:
        result = result.model_copy(update={"warnings": (*result.warnings, runner.metrics_note)})
    baseline = previous if previous is not None else store.latest()
    if baseline is not None:
        comparison = compare(result, baseline, cal.regression_threshold)
        if comparison is not None:
            result = result.model_copy(update={"comparison": comparison})
    print(format_summary(result))
    if save:
        try:
            print(f"saved: {store.save(result)}")
        except StoreError as exc:
            print(f"sentinel sweep: result not saved: {exc}", file=sys.stderr)
    if args.output_file is not None:
        try:
            args.output_file.write_text(result.model_dump_json(indent=1))
        except OSError as exc:
            print(f"sentinel sweep: cannot write {args.output_file}: {exc.strerror}", file=sys.stderr)
    if args.report is not None:
        try:
            print(f"report: {write_report(result, args.report)}")
        except ReportError as exc:
            print(f"sentinel sweep: {exc}", file=sys.stderr)
    if interrupted:
        return 130
    if result.saturation_output_throughput.value is None:
        reasons: dict[str, int] = {}
        for st in result.steps:
            for k, v in st.measurement.failure_reasons.items():
                reasons[k] = reasons.get(k, 0) + v
        why = ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items())) or result.stop_reason
        raise CliError(f"no trustworthy step against {base_url} ({why})", 1)
    if args.fail_on_regression and result.comparison is not None and result.comparison.regressed:
        return 3
    return 0


async def _run(
    cal: CalibrationSettings,
    base_url: str,
    backend: str,
    api_key: str | None,
    previous: CalibrationResult | None,
    runner: Any,
) -> tuple[CalibrationResult, bool]:
    from sglang_sentinel.calibrate.api import calibrate
    from sglang_sentinel.calibrate.progress import SweepProgress

    cancel = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, cancel.set)
            handled.append(sig)
    try:
        progress = SweepProgress(runner)
        async with progress:
            result = await calibrate(
                cal,
                base_url=base_url,
                backend=backend,
                api_key=api_key,
                previous=previous,
                on_step=progress.on_step,
                on_plan=progress.on_plan,
                runner=runner,
                cancel=cancel,
            )
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
    return result, cancel.is_set()
