"""Fake ``python -m sglang.launch_server``: logs its argv, then serves as the supervisor's fake server.

Rejects ``--nsa-*`` flags from 0.5.22 on, as the real argparse does (exit status 2).
"""

import argparse
import runpy
import sys
from pathlib import Path

import sglang

parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=30000)
args, rest = parser.parse_known_args()
print(f"server_args=ServerArgs(argv={sys.argv[1:]!r})", flush=True)
version = tuple(int(x) for x in sglang.__version__.split(".")[:3])
if version >= (0, 5, 22) and any(a.startswith("--nsa-") for a in rest):
    print(
        "launch_server.py: error: unrecognized arguments: --nsa-prefill-backend", file=sys.stderr, flush=True
    )
    sys.exit(2)
fake = Path(__file__).resolve().parents[2] / "fake_server.py"
sys.argv = [str(fake), "--host", args.host, "--port", str(args.port)]
runpy.run_path(str(fake), run_name="__main__")
