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

if [ ! -f "$peer_dir/tokenizer/tokenizer.json" ]; then
    "$venv/bin/python" "$here/peer_tokenizer.py" "$peer_dir/tokenizer"
fi

echo "peer ready: $venv/bin/python -m sglang.bench_serving --tokenizer $peer_dir/tokenizer"
