"""Which collectors run and how (section ``[collectors]``)."""

from __future__ import annotations

from sentinel.section import Section

__all__ = ["CollectorsSettings"]


class CollectorsSettings(Section):
    enabled: tuple[str, ...] = ("sglang", "sglang_log", "gpu")
