#!/usr/bin/env bash
# Prepare the bench_serving peer: SGLang 0.5.9's `python -m sglang.bench_serving` in its own venv
# plus a small locally trained tokenizer (bench_serving insists on one, even offline).
#
# Idempotent: re-running only fills in what is missing. Everything lands in benchmarks/.peer/
# (git-ignored). Override the location with SENTINEL_PEER_DIR.
#
# Why a separate venv: sglang is installed --no-deps (its full dependency set is torch and CUDA
# kernels); bench_serving itself only needs the light packages below, and transformers/datasets
# must not leak into the daemon's environment.
# Why 0.5.9: the last release whose bench_serving imports without torch.
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
    # the module's own imports, plus sglang/__init__ -> sglang.lang/utils/srt.environ.
    "$venv/bin/python" -m pip install --quiet \
        aiohttp numpy pybase64 requests datasets pillow tqdm "transformers<5" \
        ipython pydantic tokenizers
fi
"$venv/bin/python" -c "import sglang.bench_serving" \
    || { echo "peer_setup: sglang.bench_serving still does not import" >&2; exit 1; }

if [ ! -f "$peer_dir/tokenizer/tokenizer.json" ]; then
    "$venv/bin/python" "$here/peer_tokenizer.py" "$peer_dir/tokenizer"
fi

echo "peer ready: $venv/bin/python -m sglang.bench_serving --tokenizer $peer_dir/tokenizer"
