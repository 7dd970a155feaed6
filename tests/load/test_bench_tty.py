"""`sentinel bench` on a real terminal: the live progress line as an operator sees it.

The command runs as a subprocess with its output on a pseudo-terminal (`pty`), against the
simulator; what the terminal received is replayed through a small screen model (carriage
return, newline, erase-to-end-of-line) to check the final screen, and the raw bytes are checked
for how the line was drawn (in place, never one line per update).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import logging
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sglang_sentinel.load.progress import ProgressLine
from sglang_sentinel.load.records import LoadCounters, RequestRecord

_COLUMNS = 120
_LIVE = re.compile(
    r"^done (\d+)/(\d+) \| failed (\d+) \| in flight (\d+) \| ([\d,]+) out tok/s \| (\d+\.\d) s$"
)
_FINAL = re.compile(
    r"^done (\d+)/(\d+) \| failed (\d+)(?: \| cancelled (\d+))? \| ([\d,]+) out tok/s \| (\d+\.\d) s$"
)


def _set_size(fd: int, columns: int, rows: int = 40) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _screen(raw: str) -> list[str]:
    """What a terminal shows after `raw` (no wrapping: line widths are checked separately)."""
    lines, col, i = [""], 0, 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\x1b":
            seq = re.match(r"\x1b\[[0-9;?]*([@-~])", raw[i:])
            assert seq is not None, f"unexpected escape at {raw[i : i + 10]!r}"
            if seq.group(1) == "K":
                lines[-1] = lines[-1][:col]
            i += seq.end()
            continue
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("")
            col = 0
        else:
            line = lines[-1].ljust(col)
            lines[-1] = line[:col] + ch + line[col + 1 :]
            col += 1
        i += 1
    return lines


def _block_value(screen: list[str], label: str) -> str:
    row = next(line for line in screen if line.startswith(label))
    return row[len(label) :].strip()


@dataclass
class PtyRun:
    process: subprocess.Popen[bytes]
    master: int
    chunks: list[bytes]
    reader: threading.Thread
    stderr_pipe: bool

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")

    def wait_for(self, predicate: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if predicate(text):
                return text
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"never seen on the terminal (exit {self.process.poll()}): {self.text()!r}")

    def finish(self, timeout: float = 20.0) -> tuple[int, str, str]:
        """Exit code, terminal bytes (stdout + stderr when both are on it), piped stderr."""
        rc = self.process.wait(timeout=timeout)
        self.reader.join(timeout=5.0)
        err = self.process.stderr.read().decode() if self.process.stderr is not None else ""
        return rc, self.text(), err


@pytest.fixture
def bench_on_pty() -> Iterator[Callable[..., PtyRun]]:
    runs: list[PtyRun] = []

    def start(*argv: str, stderr_tty: bool = True, env: dict[str, str] | None = None) -> PtyRun:
        master, slave = os.openpty()
        _set_size(slave, _COLUMNS)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
        environ.update({"TERM": "xterm-256color", **(env or {})})

        def controlling_tty() -> None:
            # The terminal becomes the child's controlling terminal, as in an operator's
            # shell: a ^C typed on it is a SIGINT from the line discipline, echoed as "^C".
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_sentinel", "bench", *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave if stderr_tty else subprocess.PIPE,
            env=environ,
            start_new_session=True,
            preexec_fn=controlling_tty,
        )
        os.close(slave)
        chunks: list[bytes] = []

        def read() -> None:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every slave side closed (the process exited)
                    return
                if not data:
                    return
                chunks.append(data)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        run = PtyRun(proc, master, chunks, reader, not stderr_tty)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait(timeout=10)
        run.reader.join(timeout=5.0)
        os.close(run.master)
        if run.process.stderr is not None:
            run.process.stderr.close()


def _load(sim: Any, *extra: str) -> list[str]:
    return [
        "--base-url",
        sim.base_url,
        "--random-input-len",
        "64",
        "--random-output-len",
        "256",
        "--random-range-ratio",
        "1",
        *extra,
    ]


def _updates(raw: str) -> list[str]:
    """The progress line's successive contents, up to the first newline (the summary's end)."""
    head = raw.split("\n", 1)[0]
    return [u for u in head.split("\r\x1b[K") if u]


@pytest.mark.slow
def test_progress_line_updates_in_place_then_leaves_a_summary_above_the_block(
    sim_factory: Any, bench_on_pty: Callable[..., PtyRun]
) -> None:
    sim = sim_factory("--speed", "100")
    run = bench_on_pty(*_load(sim, "--num-prompts", "30", "--request-rate", "12", "--arrival", "constant"))
    rc, raw, _ = run.finish()
    assert rc == 0, raw
    assert "Traceback" not in raw

    # Drawn in place: every update before the first newline, each replacing the previous one.
    updates = _updates(raw)
    assert len(updates) >= 4, raw
    live = updates[:-1]  # the last one is the summary, checked on the screen below
    parsed = []
    for text in live:
        assert len(text) < _COLUMNS
        if text.startswith("warm-up: "):
            continue
        m = _LIVE.match(text)
        assert m is not None, text
        parsed.append(tuple(float(g.replace(",", "")) for g in m.groups()))
    assert len(parsed) >= 3, live
    dones = [p[0] for p in parsed]
    assert dones == sorted(dones)
    assert 18 <= dones[-1] < 30  # 30 over 2.5 s, drawn every 0.5 s
    assert all(p[1] == 30 and p[2] == 0 for p in parsed)
    assert all(0 <= p[3] <= 30 for p in parsed)
    assert max(p[3] for p in parsed) >= 1
    elapsed = [p[5] for p in parsed]
    assert elapsed == sorted(elapsed)
    assert elapsed[-1] - elapsed[0] >= 0.9

    # The final screen: the summary on its own line, then the block, nothing glued anywhere.
    screen = _screen(raw)
    m = _FINAL.match(screen[0])
    assert m is not None, screen[:3]
    assert m.group(1, 2, 3) == ("30", "30", "0")
    assert m.group(4) is None  # nothing cancelled
    assert screen[1] == ""
    assert screen[2] == "{:=^50}".format(" Serving Benchmark Result ")
    assert _block_value(screen, "Successful requests:") == "30"
    assert _block_value(screen, "Failed requests:") == "0"
    block_tput = float(_block_value(screen, "Output token throughput (tok/s):"))
    # The line rounds the figure to units, the block to hundredths: 2922.5034 shows as 2,923 and
    # 2922.50, so compare within half a unit (plus the block's own rounding).
    assert int(m.group(5).replace(",", "")) == pytest.approx(block_tput, abs=0.505)
    assert float(m.group(6)) == pytest.approx(
        float(_block_value(screen, "Benchmark duration (s):")), abs=0.051
    )
    # The live figure is the same definition measured so far: plausible against the final one.
    later = [p[4] for p in parsed if p[0] >= 10]
    assert later
    assert all(0.4 * block_tput <= r <= 2.0 * block_tput for r in later), (later, block_tput)
    assert sum("out tok/s" in line for line in screen) == 1


def test_ctrl_c_leaves_a_clean_line_and_the_partial_result(
    sim_factory: Any, bench_on_pty: Callable[..., PtyRun]
) -> None:
    sim = sim_factory("--speed", "100")
    run = bench_on_pty(*_load(sim, "--num-prompts", "200", "--request-rate", "10", "--arrival", "constant"))
    run.wait_for(lambda raw: any((m := _LIVE.match(u)) and int(m.group(1)) >= 5 for u in _updates(raw)), 15.0)
    os.write(run.master, b"\x03")  # Ctrl-C, typed on the terminal
    rc, raw, _ = run.finish()
    assert rc == 130, raw
    assert "Traceback" not in raw
    assert "^C" in raw  # the line discipline echoed it onto the progress line...
    screen = _screen(raw)
    assert not any("^C" in line for line in screen)  # ...and the summary replaced that line
    m = _FINAL.match(screen[0])
    assert m is not None, screen[:3]
    done = int(m.group(1))
    assert 5 <= done < 200
    assert m.group(2, 3) == ("200", "0")
    assert screen[2] == "{:=^50}".format(" Serving Benchmark Result ")
    assert _block_value(screen, "Successful requests:") == str(done)
    # Requests cut short by the interrupt are counted apart, the same in both places.
    assert _block_value(screen, "Cancelled requests:") == (m.group(4) or "0")
    assert "sentinel bench: interrupted; partial results above" in screen


@pytest.mark.slow
def test_no_progress_output_without_a_terminal_or_with_disable_tqdm(
    sim_factory: Any, bench_on_pty: Callable[..., PtyRun]
) -> None:
    sim = sim_factory("--speed", "100")
    load = _load(sim, "--num-prompts", "8", "--request-rate", "10", "--arrival", "constant")
    disabled = bench_on_pty(*load, "--disable-tqdm")
    piped = bench_on_pty(*load, stderr_tty=False)
    dumb = bench_on_pty(*load, env={"TERM": "dumb"})

    for run in (disabled, piped):
        rc, raw, err = run.finish()
        assert rc == 0, (raw, err)
        text = raw.replace("\r\n", "\n") + err
        assert "\r" not in text, text
        assert "\x1b" not in text, text
        assert "tok/s |" not in text, text
        assert "Successful requests:" in raw
    assert "done " not in err

    # A dumb terminal has no erase sequence: the line is redrawn with carriage returns and
    # blanked with spaces, and the summary is still a clean line of its own.
    rc, raw, _ = dumb.finish()
    assert rc == 0, raw
    assert "\x1b" not in raw
    head = raw.split("\n", 1)[0]
    assert head.count("\r") >= 2
    screen = _screen(raw)
    m = _FINAL.match(screen[0].rstrip())
    assert m is not None, screen[:2]
    assert m.group(1, 2, 3) == ("8", "8", "0")


# ---- the line itself, without a process ----


def _record(warmup: bool, success: bool, tokens: int = 0, failure: str | None = None) -> RequestRecord:
    rec = RequestRecord(index=0, warmup=warmup, planned=0.0)
    rec.success, rec.output_len, rec.failure = success, tokens, failure
    return rec


def test_counts_leave_out_warmup_and_cancelled_requests() -> None:
    counters = LoadCounters(warmup=True, sent=2)
    now = [100.0]
    line = ProgressLine(counters, io.StringIO(), planned=3, clock=lambda: now[0])
    line.on_record(_record(True, True, 50))
    line.on_record(_record(True, False, failure="http_500"))
    assert line.line(now[0]).startswith("warm-up: done 1 | in flight 0 | ")
    counters.warmup, counters.sent, counters.in_flight = False, 3, 1
    now[0] = 101.0
    line._note_phase(now[0])
    line.on_record(_record(False, True, 100))
    line.on_record(_record(False, False, failure="cancelled"))
    now[0] = 103.0
    assert line.line(now[0]) == "done 1/3 | failed 0 | in flight 1 | 50 out tok/s | 3.0 s"
    line.on_record(_record(False, False, failure="timeout"))
    assert line.line(now[0]).startswith("done 1/3 | failed 1 | ")


@dataclass
class _Streaming:
    tokens_seen: int


def test_tokens_count_as_they_stream_not_only_at_completion() -> None:
    counters = LoadCounters(sent=2, in_flight=2)
    now = [0.0]
    line = ProgressLine(counters, io.StringIO(), planned=2, clock=lambda: now[0])
    line._note_phase(0.0)
    # Nothing has completed yet, but 300 tokens have arrived on the two streams.
    counters.streaming = {0: _Streaming(120), 1: _Streaming(180)}
    now[0] = 2.0
    assert line.line(now[0]) == "done 0/2 | failed 0 | in flight 2 | 150 out tok/s | 2.0 s"
    # One finishes: its tokens move from the stream to the completed count, the total holds.
    del counters.streaming[0]
    counters.in_flight = 1
    line.on_record(_record(False, True, 120))
    assert line.line(now[0]) == "done 1/2 | failed 0 | in flight 1 | 150 out tok/s | 2.0 s"


async def test_the_engine_publishes_the_streams_in_flight(sim_factory: Any) -> None:
    """While a long request streams, its parser is in ``counters.streaming`` with its tokens."""
    from sglang_sentinel.load import LoadSpec, RandomDataset, run_load

    # 40 tokens over about 2 s (--speed 4): some 40 polls every 50 ms while the request streams.
    sim = sim_factory("--skip-server-warmup", "--speed", "4")
    counters = LoadCounters()
    spec = LoadSpec(
        base_url=sim.base_url, dataset=RandomDataset(16, 40, 1.0), num_requests=1, warmup_requests=0
    )
    task = asyncio.create_task(run_load(spec, counters=counters))
    seen: list[int] = []
    while not task.done():
        if counters.completed == 0:
            seen.extend(p.tokens_seen for p in counters.streaming.values())
        await asyncio.sleep(0.05)
    result = await task
    assert result.metrics.completed == 1
    # Counted while streaming, before the request completed. All 40 may be seen there too: the
    # last token comes before the end of the stream, and only then is the request completed.
    assert any(0 < n < 40 for n in seen), seen
    assert counters.streaming == {}


def test_duration_runs_show_time_against_the_duration() -> None:
    counters = LoadCounters(sent=1)
    now = [0.0]
    line = ProgressLine(counters, io.StringIO(), duration_s=60.0, clock=lambda: now[0])
    line._note_phase(0.0)
    now[0] = 12.4
    assert line.line(now[0]).endswith("| 0 out tok/s | 12.4/60 s")
    assert line.line(now[0]).startswith("done 0 | ")


def _drain(fd: int) -> bytes:
    """Everything the terminal has received so far (a pty hands it over in pieces)."""
    data = b""
    while select.select([fd], [], [], 0.2)[0]:
        data += os.read(fd, 4096)
    return data


def test_a_narrow_terminal_gets_a_truncated_line_never_a_wrapped_one() -> None:
    master, slave = os.openpty()
    try:
        _set_size(slave, 30)
        with open(slave, "w", encoding="utf-8", closefd=False) as stream:
            line = ProgressLine(LoadCounters(sent=1), stream, planned=1000, term="xterm")
            line._note_phase(line.started)
            line.draw(line.line(line.started + 5))
            _set_size(slave, 24)  # resized mid-run
            line.draw(line.line(line.started + 6))
        raw = _drain(master).decode()
    finally:
        os.close(master)
        os.close(slave)
    first, second = [u for u in raw.split("\r\x1b[K") if u]
    # One column is left free: writing the last one would wrap on some terminals.
    assert first == "done 0/1000 | failed 0 | in f"
    assert second == "done 0/1000 | failed 0 "


async def test_a_log_line_goes_above_the_progress_line_not_glued_to_it() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    # Its own level: earlier tests may have left the root logger at "error".
    logger = logging.getLogger("sentinel.test.progress")
    logger.setLevel(logging.INFO)
    try:
        counters = LoadCounters(sent=1, in_flight=1)
        line = ProgressLine(counters, stream, planned=4, term="xterm")
        line._note_phase(line.started)
        with line.logs_above():
            line.draw(line.line(line.started))
            logger.warning("the server said something")
            drawing = asyncio.create_task(line.run())
            await asyncio.sleep(0.3)
            drawing.cancel()
            await asyncio.gather(drawing, return_exceptions=True)
        assert not handler.filters
    finally:
        root.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    raw = stream.getvalue()
    screen = _screen(raw)
    assert screen[0] == "the server said something"
    assert screen[1].startswith("done 0/4 | failed 0 | in flight 1 | ")
    assert raw.index("the server said something") > raw.index("\r\x1b[Kdone 0/4")


class _GoneTerminal(io.StringIO):
    def write(self, s: str) -> int:
        raise OSError(5, "Input/output error")


def test_a_terminal_that_went_away_stops_the_line_not_the_run() -> None:
    line = ProgressLine(LoadCounters(sent=1), _GoneTerminal(), planned=2, term="xterm")
    line._note_phase(line.started)
    line.draw(line.line(line.started + 1))  # EIO: recorded, not raised
    line.clear()
    line.finish(None)
