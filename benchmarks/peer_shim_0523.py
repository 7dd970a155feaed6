"""Run SGLang 0.5.23's ``python -m sglang.benchmark.serving ARGS`` without torch (peer venv ``venv23``).

0.5.23's bench_serving itself needs no torch, but three package ``__init__`` modules on its import
path do: ``sglang/__init__`` and ``sglang/srt/utils/__init__`` (``srt/utils/common.py`` imports
torch), ``sglang/srt/disaggregation/utils`` (for one string constant, ``FAKE_BOOTSTRAP_HOST``).
This shim registers those packages as plain namespace modules pointing at the installed wheel's
directories (so every submodule bench_serving imports is the wheel's own, unchanged), gives the
one constant its value, and points ``sglang.srt.rust_extensions.load_rust_extension`` at a plain
import of the wheel's compiled extension (``_bench.cpython-311-x86_64-linux-gnu.so``): the loader
it replaces would only look for a Rust source tree to rebuild from, which a wheel does not ship.
Nothing bench_serving sends, parses, measures or prints changes; ``--rust-client`` runs the Rust
client exactly as ``serving.py`` calls it (``run_rust_benchmark(args)``).

Usage: ``.peer/venv23/bin/python peer_shim_0523.py --backend sglang --base-url ... [--rust-client]``
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys
import types


def _install_stubs() -> None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        raise SystemExit("peer_shim_0523: sglang is not installed in this interpreter")
    root = os.path.dirname(spec.origin)
    for name, sub in (
        ("sglang", ""),
        ("sglang.srt", "srt"),
        ("sglang.srt.utils", "srt/utils"),
        ("sglang.srt.disaggregation", "srt/disaggregation"),
        ("sglang.srt.rust_extensions", "srt/rust_extensions"),
    ):
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(root, sub)]
        sys.modules[name] = mod
    disagg = types.ModuleType("sglang.srt.disaggregation.utils")
    disagg.FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # type: ignore[attr-defined]  # its value in 0.5.23
    sys.modules[disagg.__name__] = disagg

    def load_rust_extension(python_module: str, **_: object) -> types.ModuleType:
        return importlib.import_module(python_module)

    sys.modules["sglang.srt.rust_extensions"].load_rust_extension = load_rust_extension  # type: ignore[attr-defined]


if __name__ == "__main__":
    _install_stubs()
    sys.argv = ["sglang.benchmark.serving", *sys.argv[1:]]
    runpy.run_module("sglang.benchmark.serving", run_name="__main__", alter_sys=True)
