"""The collector registry, in node_exporter's manner.

Each source module registers a factory under a name, with the part of the configuration it
needs (``@register("gpu", section=lambda s: s.collectors.gpu)``: the factory sees its section,
never the whole configuration); ``[collectors] enabled`` picks which run; :class:`CollectorSet`
is the one prometheus_client Collector that wraps them all and adds, on every scrape,
``sentinel_collector_state{collector,state}`` (ok, failing, not_applicable: 1 on the current one),
``sentinel_collector_success{collector}`` (absent while not applicable) and
``sentinel_collector_duration_seconds{collector}``
(and, for sources that know it, ``sentinel_collector_last_success_timestamp_seconds{collector}``),
and the daemon's own ``process_*`` series (prometheus_client's ProcessCollector: resident memory,
CPU seconds, open and max fds, start time), which the usual exporter alerts and dashboards read.

A source that fails raises :class:`~sglang_sentinel.collect.source.CollectionFailed` (or anything else:
a bug in one collector must not take the whole scrape down). What it yielded before failing is
still served — a source that must not serve partial data raises before yielding.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sglang_sentinel.collect.build_info import BuildInfoCollector
from sglang_sentinel.collect.source import Background, CollectionFailed, NotApplicable, Source, Timestamped
from sglang_sentinel.log import get_logger

if TYPE_CHECKING:
    from sglang_sentinel.collect.settings import CollectorsSettings

__all__ = [
    "CollectorInputs",
    "CollectorSet",
    "Factory",
    "ServerEndpoint",
    "available",
    "build_collector_set",
    "register",
]

_log = get_logger(__name__)
# A collector that has never worked is taken for "server still starting" this long (sglang.service's
# TimeoutStartSec=1800: weights load for many minutes) before its failure is a warning.
NOT_UP_GRACE_SECONDS = 1800.0

CollectorState = Literal["ok", "failing", "not_applicable"]
_STATES: tuple[CollectorState, ...] = ("ok", "failing", "not_applicable")


class ServerEndpoint(Protocol):
    """Where the server listens (``[server]`` host/port): the default of the sglang collector's URL."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class CollectorInputs(Protocol):
    """What a collector factory reads of the configuration: ``[collectors]`` and the server's address.

    :class:`sglang_sentinel.config.Settings` is one. Declared here, not imported: the config composes
    this package's settings section, so it sits a layer above and collect must not import it.
    """

    @property
    def collectors(self) -> CollectorsSettings: ...

    @property
    def server(self) -> ServerEndpoint: ...


_S = TypeVar("_S")
# A factory takes its own section (what ``register``'s ``section`` picks) and makes the source.
Factory = Callable[[_S], Source]

# name -> (the registered factory, settings -> source)
_FACTORIES: dict[str, tuple[object, Callable[[CollectorInputs], Source]]] = {}
# Imported on first use so each registers itself; kept here so the list of built-ins is in one place.
_BUILTIN_MODULES = {
    "sglang": "sglang_sentinel.collect.sglang_metrics",
    "sglang_log": "sglang_sentinel.collect.sglang_log",
    "gpu": "sglang_sentinel.collect.gpu.collector",
    "router": "sglang_sentinel.collect.router",
}


def register(
    name: str, section: Callable[[CollectorInputs], _S]
) -> Callable[[Callable[[_S], Source]], Callable[[_S], Source]]:
    """Function decorator: ``@register("gpu", section=...)`` on a ``factory(section) -> Source``.

    ``section`` picks (or derives) what the factory needs from the settings; keeping the choice
    beside the factory means a collector's dependencies on the configuration are visible in one
    line, and a factory cannot quietly start reading other sections."""

    def decorate(factory: Callable[[_S], Source]) -> Callable[[_S], Source]:
        if name in _FACTORIES and _FACTORIES[name][0] is not factory:
            raise ValueError(f"collector {name!r} registered twice")
        _FACTORIES[name] = (factory, lambda settings: factory(section(settings)))
        return factory

    return decorate


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES.values():
        importlib.import_module(module)


def available() -> frozenset[str]:
    """Names that ``[collectors] enabled`` accepts."""
    _load_builtins()
    return frozenset(_FACTORIES)


def build_collector_set(settings: CollectorInputs) -> CollectorSet:
    """One instance of every enabled collector, in the configured order (not started)."""
    _load_builtins()
    return CollectorSet((name, _FACTORIES[name][1](settings)) for name in settings.collectors.enabled)


class CollectorSet:
    """Every source behind one ``collect()``, with per-source success and duration.

    Register it in a (private) ``CollectorRegistry`` — :meth:`registry` makes one — and serve that.
    ``collect()`` may run in several threads at once (concurrent scrapes): sources must build fresh
    metric families from immutable snapshots, as all of sentinel's do.
    """

    def __init__(self, sources: Iterable[tuple[str, Source]] = ()) -> None:
        self._sources: dict[str, Source] = {}
        self._failing: dict[str, str] = {}
        self._not_applicable: dict[str, str] = {}
        self._collected: set[str] = set()
        # Collectors that have succeeded once, and when the others first failed (monotonic).
        self._succeeded: set[str] = set()
        self._first_failure: dict[str, float] = {}
        self._late: set[str] = set()
        # monotonic time of the latest full collection, so callers can tell whether the success
        # flags are current (nobody may scrape the embedded default: it has no Prometheus).
        self._last_collect: float | None = None
        self._build_info = BuildInfoCollector()
        # registry=None: not the global default registry; served through this set only. Reads
        # /proc/self (Linux); elsewhere it yields nothing.
        self._process = ProcessCollector(registry=None)
        self._started = False
        for name, source in sources:
            self.add(name, source)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._sources)

    def add(self, name: str, source: Source) -> None:
        """Add a source (e.g. the supervisor's Collector) so it gets success/duration series too."""
        if name in self._sources:
            raise ValueError(f"collector {name!r} added twice")
        self._sources[name] = source
        if self._started and isinstance(source, Background):
            source.start()

    @property
    def failing(self) -> dict[str, str]:
        """Collectors whose latest collection failed, with the reason (for the status page)."""
        return dict(self._failing)

    @property
    def not_applicable(self) -> dict[str, str]:
        """Collectors with nothing to read on this host (and none expected), with the reason."""
        return dict(self._not_applicable)

    def outcome(self, name: str) -> bool | None:
        """True/False for the latest collection of ``name``; None before its first one, and while
        it is not applicable (no verdict: nothing was there to collect)."""
        if name not in self._collected or name in self._not_applicable:
            return None
        return name not in self._failing

    def state(self, name: str) -> CollectorState | None:
        """ok / failing / not_applicable for the latest collection of ``name``; None before its first."""
        if name not in self._collected:
            return None
        if name in self._not_applicable:
            return "not_applicable"
        return "failing" if name in self._failing else "ok"

    def is_stale(self, max_age: float) -> bool:
        """No full collection (a scrape or :meth:`refresh`) in the last ``max_age`` seconds."""
        return self._last_collect is None or time.monotonic() - self._last_collect > max_age

    def refresh(self) -> None:
        """Collect once and discard the output: brings the success flags up to date when nothing
        scrapes. Blocking (the SGLang fetch); run it in a worker thread."""
        for _ in self.collect():
            pass

    def get(self, name: str) -> Source | None:
        return self._sources.get(name)

    def registry(self) -> CollectorRegistry:
        """A fresh private registry holding only this set (its own process_* series included, no
        platform/GC collectors)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry

    async def start(self) -> None:
        """Start background sources (GPU threads). Returns at once; their first data follows."""
        self._started = True
        for source in self._sources.values():
            if isinstance(source, Background):
                source.start()

    async def stop(self, grace: float = 5.0) -> None:
        """Stop background sources, waiting at most about ``grace`` seconds in all."""
        self._started = False
        background = [s for s in self._sources.values() if isinstance(s, Background)]
        if background:
            await asyncio.gather(*(asyncio.to_thread(s.stop, grace) for s in background))
        for source in self._sources.values():
            close = getattr(source, "close", None)  # e.g. the SGLang collector's HTTP client
            if callable(close):
                close()

    # prometheus_client's registry calls describe() when present; without it, it would call
    # collect() at registration, which would fetch from SGLang for nothing.
    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        began = time.monotonic()
        yield from self._build_info.collect()
        yield from self._process.collect()
        success = GaugeMetricFamily(
            "sentinel_collector_success",
            "1 when this collector's latest collection succeeded.",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            "sentinel_collector_duration_seconds",
            "How long this collector took during this scrape.",
            labels=["collector"],
        )
        last = GaugeMetricFamily(
            "sentinel_collector_last_success_timestamp_seconds",
            "When this collector last had good data (background reads, log lines).",
            labels=["collector"],
        )
        states = GaugeMetricFamily(
            "sentinel_collector_state",
            "1 on this collector's state after its latest collection: ok, failing, or not_applicable "
            "(nothing to read on this host and none expected, e.g. no NVIDIA driver where the launch "
            "needs no GPU; sentinel_collector_success is absent then).",
            labels=["collector", "state"],
        )
        for name, source in self._sources.items():
            start = time.perf_counter()
            state, metrics = self._run(name, source)
            duration.add_metric([name], time.perf_counter() - start)
            if state != "not_applicable":
                success.add_metric([name], 1.0 if state == "ok" else 0.0)
            for each in _STATES:
                states.add_metric([name, each], 1.0 if each == state else 0.0)
            if isinstance(source, Timestamped):
                ts = source.last_success_timestamp()
                if ts is not None:
                    last.add_metric([name], ts)
            yield from metrics
        # Recorded once every source has answered, as of when it began: a collection still in
        # flight (the status loop's, say) must not make a caller think the flags are current.
        self._last_collect = began
        yield success
        yield states
        yield duration
        yield last

    def _run(self, name: str, source: Source) -> tuple[CollectorState, list[Metric]]:
        metrics: list[Metric] = []
        reason: str | None = None
        try:
            for metric in source.collect():
                metrics.append(metric)
        except NotApplicable as exc:
            self._collected.add(name)
            self._failing.pop(name, None)
            if name not in self._not_applicable:
                _log.info("collector_not_applicable", collector=name, reason=str(exc))
            self._not_applicable[name] = str(exc) or "not applicable"
            return "not_applicable", metrics
        except CollectionFailed as exc:
            reason = str(exc) or "failed"
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            _log.exception("collector_crashed", collector=name)
        # Log on change only: a server that is down for an hour must not log every 15 s scrape.
        self._collected.add(name)
        self._not_applicable.pop(name, None)
        previous = self._failing.get(name)
        if reason is None:
            self._succeeded.add(name)
        if reason is not None and name not in self._succeeded:
            # Never worked yet: the server is still starting (a 744B model loads for many
            # minutes), which is no failure. Info now; a warning once it outlasts a start.
            first = self._first_failure.setdefault(name, time.monotonic())
            late = time.monotonic() - first >= NOT_UP_GRACE_SECONDS
            if reason != previous or (late and name not in self._late):
                level = _log.warning if late else _log.info
                level("collector_failing" if late else "collector_not_up_yet", collector=name, reason=reason)
                if late:
                    self._late.add(name)
            self._failing[name] = reason
        elif reason is not None and reason != previous:
            _log.warning("collector_failing", collector=name, reason=reason)
            self._failing[name] = reason
        elif reason is None and previous is not None:
            _log.info("collector_recovered", collector=name)
            del self._failing[name]
        return ("ok" if reason is None else "failing"), metrics
