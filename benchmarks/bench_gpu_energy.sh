#!/usr/bin/env bash
# `sentinel bench --gpu-energy on` on a real GPU against nvidia-smi's power readings.
#
#   OUT=/some/dir bash benchmarks/bench_gpu_energy.sh     # on a GPU machine, from the repo root
#
# The simulator serves (it needs no GPU); GPU 0 is metered by the bench (`--gpus 0`) while a bf16
# matmul load that starts after the bench's idle window swings its draw (0.3 s on, 0.3 s off, 45 s,
# PyTorch). nvidia-smi logs the instant power every 100 ms alongside. The bench's energy window is
# its measured phase, which ends at its last response: the script integrates nvidia-smi's instant
# power over the window's length before the bench ended and compares it with the counter's joules,
# and compares the bench's idle power with nvidia-smi's readings before the load.
# Needs: nvidia-smi (its timestamps read as UTC, the machine's clock), python3 with the runtime
# dependencies, and torch. PYTHON picks sentinel's interpreter, TORCH_PYTHON the load's.
set -euo pipefail
: "${OUT:?set OUT to a directory for the logs}"
PY=${PYTHON:-python3}
TORCH_PY=${TORCH_PYTHON:-python3}  # the interpreter that has PyTorch, for the load
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/daemon${PYTHONPATH:+:$PYTHONPATH}
ready=$OUT/sim.json
rm -f "$ready"
$PY -m sglang_sentinel_sim --port 0 --ready-file "$ready" --speed 1 --enable-metrics >"$OUT/sim.log" 2>&1 &
sim=$!
trap 'kill $sim ${smi:-} 2>/dev/null || true' EXIT
for _ in $(seq 150); do [ -s "$ready" ] && break; sleep 0.2; done
port=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['port'])" "$ready")
nvidia-smi --query-gpu=timestamp,power.draw.instant --format=csv,noheader,nounits -i 0 -lms 100 >"$OUT/power.csv" &
smi=$!
(sleep 14; $TORCH_PY -c "
import time, torch
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + 45
while time.time() < end:
    t = time.time()
    while time.time() - t < 0.3:
        (a @ b).sum().item()
    time.sleep(0.3)
") &
load=$!
$PY -m sglang_sentinel bench --backend sglang --base-url "http://127.0.0.1:$port" --dataset-name random \
    --num-prompts 200 --request-rate 8 --random-input-len 256 --random-output-len 256 \
    --gpu-energy on --gpus 0 --gpu-idle-seconds 5 --output-file "$OUT/bench.jsonl" >"$OUT/bench.txt"
date +%s.%N >"$OUT/bench_end"
wait $load
kill $smi
sed -n '/GPU energy/,$p' "$OUT/bench.txt"
$PY - "$OUT" <<'PY'
import csv, datetime, json, sys
from pathlib import Path
out = Path(sys.argv[1])
energy = json.loads((out / "bench.jsonl").read_text().splitlines()[-1])["energy"]
rows = []
for r in csv.reader((out / "power.csv").open()):
    when = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
    rows.append((when.timestamp(), float(r[1])))
end = float((out / "bench_end").read_text())
window = [r for r in rows if end - energy["seconds"] <= r[0] <= end]
smi = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(window, window[1:]))
print(f"window {energy['seconds']:.2f} s: counter {energy['joules']:.0f} J, nvidia-smi instant power x time "
      f"{smi:.0f} J ({(energy['joules'] - smi) / smi * 100:+.2f} %); bench mean {energy['mean_power_watts']:.1f} W, "
      f"idle {energy['baseline_power_watts']:.1f} W against nvidia-smi's first reading {rows[0][1]:.1f} W")
PY
