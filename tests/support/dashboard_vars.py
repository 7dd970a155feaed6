"""A dashboard query as Grafana sends it with its template variables at All (grafana/generate.py:
`cluster` matches series without the label too), optionally with one instance picked."""

from __future__ import annotations

import re

# The All value of each query variable of the generated dashboards.
ALL = {"cluster": ".*", "job": ".+", "instance": ".+", "model_name": ".+", "gpu": ".+", "profile": ".+"}


def at_all(expr: str, *, instance: str | None = None) -> str:
    values = dict(ALL)
    if instance is not None:
        # A regex inside a PromQL string: its backslashes doubled, as Grafana escapes them.
        values["instance"] = re.escape(instance).replace("\\", "\\\\")
    return re.sub(r"\$([A-Za-z_]\w*)", lambda m: values.get(m.group(1), m.group(0)), expr)
