"""A wheel's direct runtime dependencies and their floors (stdlib only).

    python tests/release/floors.py WHEEL            # the requirements, one a line (for uv -r)
    VENV/bin/python tests/release/floors.py WHEEL --check   # each is installed at its floor

``uv pip install --resolution lowest-direct WHEEL`` takes only the wheel as direct; its own
dependencies would resolve to their newest. Passing them as requirements too makes them direct, and
``--check`` proves the venv holds each at the version its ``>=`` names (exit 1 naming any other).
"""

from __future__ import annotations

import re
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path


def requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as whl:
        name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(whl.read(name).decode())
    return [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]


def floor(requirement: str) -> tuple[str, str]:
    match = re.match(r"([A-Za-z0-9_.-]+)\s*[^;]*?>=\s*([0-9][0-9A-Za-z.]*)", requirement)
    if not match:
        raise SystemExit(f"floors: {requirement!r} has no >= floor")
    return match.group(1), match.group(2)


def main() -> int:
    reqs = requirements(Path(sys.argv[1]))
    if sys.argv[2:] != ["--check"]:
        print("\n".join(reqs))
        return 0
    wrong = []
    for req in reqs:
        name, low = floor(req)
        have = metadata.version(name)
        # A yanked floor (bcrypt 4.1.0) resolves to the next patch release: same major.minor.
        same_minor = have.rsplit(".", 1)[0] == low.rsplit(".", 1)[0]
        if have != low and not (have.startswith(low + ".") or same_minor):
            wrong.append(f"{name} {have} (floor {low})")
        print(f"floors: {name}=={have} (>= {low})")
    for w in wrong:
        print(f"floors: not at the floor: {w}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
