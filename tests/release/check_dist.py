"""What the built sdist and wheel must hold: ``python tests/release/check_dist.py DIST``.

Run by scripts/release-check after ``python -m build``. Standard library only. Exit 1 naming each
missing piece: the licence file in both archives, the licence expression, classifiers and project
URLs in the wheel's METADATA, the version equal to the package's, the chart's appVersion and
CHANGELOG.md's latest release, and the import packages, which must be the distribution's own names.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from release.versions import changelog_version, chart_app_version, package_version  # noqa: E402

# Distribution name = import name (PEP 8's convention): no other PyPI project can own these names.
IMPORT_PACKAGES = {"sglang_sentinel", "sglang_sentinel_sim"}


def check(dist: Path) -> list[str]:
    problems: list[str] = []
    version = package_version()
    named = (("CHANGELOG.md", changelog_version()), ("Chart.yaml appVersion", chart_app_version()))
    for name, found in named:
        if found != version:
            problems.append(f"{name} says {found}, the package {version}")
    wheels = sorted(dist.glob("sglang_sentinel-*.whl"))
    sdists = sorted(dist.glob("sglang_sentinel-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [*problems, f"expected one wheel and one sdist in {dist}, found {wheels + sdists}"]
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
        info = f"sglang_sentinel-{version}.dist-info"
        if f"{info}/licenses/LICENSE" not in names:
            problems.append(f"wheel: no {info}/licenses/LICENSE")
        meta = Parser().parsestr(whl.read(f"{info}/METADATA").decode())
        tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        if tops != IMPORT_PACKAGES:
            problems.append(f"wheel: top-level packages {sorted(tops)}, expected {sorted(IMPORT_PACKAGES)}")
        lic = f"{info}/licenses/LICENSE"
        license_text = whl.read(lic).decode() if lic in names else ""
    if meta["Version"] != version:
        problems.append(f"wheel METADATA Version {meta['Version']}, the package {version}")
    if meta["License-Expression"] != "Apache-2.0":
        problems.append(f"wheel METADATA License-Expression {meta['License-Expression']!r}")
    if "Apache License" not in license_text or "Version 2.0, January 2004" not in license_text:
        problems.append("wheel LICENSE is not the Apache-2.0 text")
    classifiers = meta.get_all("Classifier") or []
    if "Programming Language :: Python :: 3.11" not in classifiers:
        problems.append("wheel METADATA: no Python 3.11 classifier")
    if not meta.get_all("Project-URL"):
        problems.append("wheel METADATA: no Project-URL")
    if meta["Requires-Python"] != ">=3.11":
        problems.append(f"wheel METADATA Requires-Python {meta['Requires-Python']!r}")
    with tarfile.open(sdists[0]) as sdist:
        members = set(sdist.getnames())
    root = f"sglang_sentinel-{version}"
    for want in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "PKG-INFO"):
        if f"{root}/{want}" not in members:
            problems.append(f"sdist: no {root}/{want}")
    return problems


def main() -> int:
    problems = check(Path(sys.argv[1]))
    for p in problems:
        print(f"check_dist: {p}", file=sys.stderr)
    if not problems:
        print(f"check_dist: sdist and wheel {package_version()}: licence, metadata, version agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
