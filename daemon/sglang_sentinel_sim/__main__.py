"""``python -m sglang_sentinel_sim``: the simulator without the ``sentinel`` command in front."""

from __future__ import annotations

import sys

from sglang_sentinel_sim.command import main

if __name__ == "__main__":
    sys.exit(main())
