"""Fake ``sglang`` console script (``sglang = sglang.cli.main:main``): only ``serve``."""

import sys

from sglang._fake_server import run


def main() -> None:
    if sys.argv[1:2] != ["serve"]:
        print("sglang: only 'serve' is faked", file=sys.stderr)
        sys.exit(2)
    run(sys.argv[2:], "sglang serve")
