"""Lazy package exports (PEP 562): a package's public names are imported on first use.

``sglang_sentinel.config`` imports every package's ``settings`` module, which first runs the package's
``__init__``; every CLI command (and every ``sentinel sim`` subprocess) loads the config. An
``__init__`` that imported its heavy modules (HTTP clients, the load engine, NVML, APScheduler)
would make all of them pay for it. A package instead lists its public names here and imports
them for type checkers only::

    if TYPE_CHECKING:
        from sglang_sentinel.pkg.module import Thing
    __getattr__ = lazy_exports(__name__, {"Thing": "sglang_sentinel.pkg.module"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving ``exports`` (public name -> defining module)."""
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        # Cached in the package: later lookups are plain attribute reads.
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
