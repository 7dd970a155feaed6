"""What every HTML report sentinel writes shares: matplotlib on demand, PNGs, the page, tables.

The calibration report (`sentinel sweep --report`), the bench report (`sentinel bench
--output-html`) and the tune report (`sentinel tune`) are each one self-contained page: inline
CSS, no script, PNG plots embedded as data URIs, so it survives being mailed or attached to a
ticket. Plots come from matplotlib, the optional ``report`` extra (numpy, pillow and fonttools
the always-on daemon never needs); it is imported only when a report is drawn, and its absence
is one line naming the flag that wanted it and the install command, never a traceback.
"""

from __future__ import annotations

import base64
import html
import importlib.util
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Cell",
    "ReportError",
    "draw_plots",
    "esc",
    "img_tag",
    "load_pyplot",
    "page",
    "png",
    "require_matplotlib",
    "table",
]

INSTALL_HINT = "pip install 'sglang-sentinel[report]'"


class ReportError(Exception):
    """A report could not be made (matplotlib missing, a plot failed, the file not written)."""


def _missing(flag: str) -> ReportError:
    return ReportError(f"{flag} needs matplotlib: {INSTALL_HINT}")


def require_matplotlib(flag: str) -> None:
    """Fail now, before a long run, when the report at its end could not be drawn.

    Looks the package up without importing it: matplotlib (with numpy) costs tens of MB and a
    noticeable share of a CPU-second, which a load client must not spend before it measures."""
    if importlib.util.find_spec("matplotlib") is None:
        raise _missing(flag)


def load_pyplot(flag: str) -> Any:
    """matplotlib.pyplot on the Agg backend; `ReportError` naming ``flag`` when not installed."""
    try:
        import matplotlib
    except ImportError:
        raise _missing(flag) from None
    matplotlib.use("Agg")  # no display on a server; must precede pyplot's import
    import matplotlib.pyplot as plt

    return plt


def png(plt: Any, fig: Any) -> bytes:
    """The figure as PNG bytes; the figure is closed (pyplot keeps every open one alive)."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


def draw_plots(plt: Any, plots: Mapping[str, Callable[[Any], bytes] | None]) -> dict[str, bytes]:
    """Run each drawing (``None``: nothing to draw, left out) into ``{name: png}``.

    matplotlib raises assorted errors on degenerate data; the figures the report shows are
    already safe elsewhere (printed, stored), so a failed plot is one line, not a traceback."""
    try:
        return {name: draw(plt) for name, draw in plots.items() if draw is not None}
    except Exception as exc:
        plt.close("all")
        raise ReportError(f"cannot draw the report's plots: {type(exc).__name__}: {exc}") from exc


def esc(value: Any) -> str:
    """Text for HTML: escaped, quotes included (attribute-safe); None is empty."""
    return html.escape("" if value is None else str(value), quote=True)


def img_tag(name: str, data: bytes) -> str:
    b64 = base64.b64encode(data).decode()
    return f'<img alt="{esc(name)}" src="data:image/png;base64,{b64}">'


@dataclass(frozen=True, slots=True)
class Cell:
    """A table cell: text (escaped) or trusted ``markup``, with a CSS class ("num": right-aligned);
    ``head``: a row's label cell (``<th>``)."""

    text: str
    cls: str = ""
    markup: bool = False
    head: bool = False


def _cell(tag: str, value: str | Cell) -> str:
    c = value if isinstance(value, Cell) else Cell(value)
    if c.head:
        tag = "th"
    body = c.text if c.markup else esc(c.text)
    cls = f" class={c.cls}" if c.cls else ""
    return f"<{tag}{cls}>{body}</{tag}>"


def table(
    head: Sequence[str | Cell],
    rows: Iterable[Sequence[str | Cell]],
    *,
    row_classes: Sequence[str] | None = None,
) -> str:
    """One ``<table>``: a header row (none when ``head`` is empty), then the rows
    (``row_classes[i]``: row i's class)."""
    out = ["<table>" + ("<tr>" + "".join(_cell("th", h) for h in head) + "</tr>" if head else "")]
    for i, row in enumerate(rows):
        cls = row_classes[i] if row_classes is not None and i < len(row_classes) else ""
        attr = f" class={cls}" if cls else ""
        out.append(f"<tr{attr}>" + "".join(_cell("td", c) for c in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin:0 0 4px} .sub{color:#666;margin-bottom:16px}
table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fff3f3} .warn{background:#fff8e1;border-left:4px solid #f0ad4e;padding:6px 10px}
.regress{background:#fdecea;border-left:4px solid #d62728;padding:6px 10px;font-weight:600}
.ok{background:#e8f5e9;border-left:4px solid #2ca02c;padding:6px 10px}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
pre{background:#f5f5f5;border:1px solid #ddd;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere;
font-size:12px}
"""


def page(title: str, body: str) -> str:
    """The whole document around ``body`` (trusted markup); ``title`` is escaped here."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{CSS}</style></head><body>
{body}
</body></html>
"""
