#!/usr/bin/env bash
# Prepare the bench_serving peers: SGLang 0.5.9's `python -m sglang.bench_serving` in its own venv
# (venv/), SGLang 0.5.23's `sglang.benchmark.serving` with its Rust client (`--rust-client`, the
# wheel's compiled sglang/srt/rust_extensions/_bench extension) in another (venv23/), plus a small
# locally trained tokenizer (bench_serving insists on one, even offline).
#
# Idempotent: re-running only fills in what is missing. Everything lands in benchmarks/.peer/
# (git-ignored). Override the location with SENTINEL_PEER_DIR.
#
# Why a separate venv: sglang is installed --no-deps (its full dependency set is torch and CUDA
# kernels); bench_serving itself only needs the light packages below, and transformers/datasets
# must not leak into the daemon's environment.
# Why 0.5.9: the last release whose bench_serving imports without torch; 0.5.23's runs through
# benchmarks/peer_shim_0523.py, which skips the three package __init__ modules that import torch.
# The Rust extension is built for CPython 3.11 on x86-64 Linux: venv23 needs a python3.11
# (PYTHON311, default python3.11); without one the setup says so and leaves venv23 out.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peer_dir="${SENTINEL_PEER_DIR:-$here/.peer}"
venv="$peer_dir/venv"
python="${PYTHON:-python3}"

mkdir -p "$peer_dir"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi

if ! "$venv/bin/python" -c "import sglang.bench_serving" >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install --quiet --no-deps "sglang==0.5.9"
    # Exactly what `import sglang.bench_serving` pulls in (found by importing until it succeeds):
    # the module's own imports, plus sglang/__init__ -> sglang.lang/utils/srt.environ. Pinned to the
    # versions the comparison figures were measured with; transformers 4.57 is what 0.5.9 expects.
    "$venv/bin/python" -m pip install --quiet \
        aiohttp==3.14.5 numpy==2.4.6 pybase64==1.5.1 requests==2.34.2 datasets==5.0.1 \
        pillow==13.0.0 tqdm==4.70.1 transformers==4.57.6 ipython==9.18.1 pydantic==2.14.4 \
        tokenizers==0.22.2
fi
if ! "$venv/bin/python" -c "import sglang.bench_serving" >/dev/null 2>&1; then
    "$venv/bin/python" -c "import sglang.bench_serving"  # show why
    echo "peer_setup: sglang.bench_serving does not import" >&2
    exit 1
fi

venv23="$peer_dir/venv23"
python311="${PYTHON311:-python3.11}"
peer23_check="import runpy, sys; sys.argv = ['x', '--help']; sys.path.insert(0, '$here')
import peer_shim_0523 as s; s._install_stubs()
import sglang.benchmark.serving, sglang.srt.rust_extensions._bench"
if ! command -v "$python311" >/dev/null 2>&1; then
    echo "peer_setup: no $python311: skipping the 0.5.23 peer (its Rust client is a CPython 3.11 build)" >&2
else
    if [ ! -x "$venv23/bin/python" ]; then
        "$python311" -m venv "$venv23"
        "$venv23/bin/python" -m pip install --quiet --upgrade pip
    fi
    if ! "$venv23/bin/python" -c "$peer23_check" >/dev/null 2>&1; then
        "$venv23/bin/python" -m pip install --quiet --no-deps "sglang==0.5.23"
        # 0.5.9's set plus what 0.5.23's serving.py and sglang.srt.utils.network import (orjson,
        # msgspec, psutil, pyzmq); the tokenizer loads with transformers 4.57 (no model code runs).
        "$venv23/bin/python" -m pip install --quiet \
            aiohttp==3.14.5 numpy==2.4.6 pybase64==1.5.1 requests==2.34.2 datasets==5.0.1 \
            pillow==13.0.0 tqdm==4.70.1 transformers==4.57.6 ipython==9.18.1 pydantic==2.14.4 \
            tokenizers==0.22.2 orjson==3.13.0 msgspec==0.23.0 psutil==7.2.2 pyzmq==27.3.0
    fi
    if ! "$venv23/bin/python" -c "$peer23_check" >/dev/null 2>&1; then
        "$venv23/bin/python" -c "$peer23_check"  # show why
        echo "peer_setup: sglang 0.5.23's bench_serving or its Rust client does not import" >&2
        exit 1
    fi
fi

if [ ! -f "$peer_dir/tokenizer/tokenizer.json" ]; then
    "$venv/bin/python" "$here/peer_tokenizer.py" "$peer_dir/tokenizer"
fi

echo "peer ready: $venv/bin/python -m sglang.bench_serving --tokenizer $peer_dir/tokenizer"
if [ -x "$venv23/bin/python" ]; then
    echo "peer ready: $venv23/bin/python $here/peer_shim_0523.py [--rust-client] --tokenizer $peer_dir/tokenizer"
fi
