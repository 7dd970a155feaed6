"""Fake ``python -m sglang.launch_server`` (see ``_fake_server``)."""

import sys

from sglang._fake_server import run

if __name__ == "__main__":
    run(sys.argv[1:], "launch_server.py")
