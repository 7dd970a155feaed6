"""GPU series from the poller's snapshot: the ``gpu`` collector.

Scrapes never call NVML: they render the latest snapshot. A GPU's data series are exported only
when its latest read succeeded and is fresh (at most ``2 × interval + timeout`` old), so a wedged
or lost GPU makes its series disappear rather than go silently stale; its identity and read-health
series stay, and the collector reports failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sglang_sentinel.collect.gpu.fake import nvml_backend
from sglang_sentinel.collect.gpu.health import GpuHealth
from sglang_sentinel.collect.gpu.poller import NO_DRIVER, GpuPoller, GpuSnapshot
from sglang_sentinel.collect.gpu.reading import DeviceIdentity, DeviceReading
from sglang_sentinel.collect.registry import register
from sglang_sentinel.collect.render import render_families
from sglang_sentinel.collect.source import CollectionFailed, NotApplicable

if TYPE_CHECKING:
    from sglang_sentinel.collect.settings import GpuSettings

__all__ = ["GpuCollector"]

_ID = ["gpu", "uuid", "name", "pci_bus_id"]
# deploy/alerts.yml's GpuXidCritical list: uncorrectable ECC (48), GSP/firmware (62, 119, 120),
# row-remap failure (64), NVLink (74), fell off the bus (79), uncontained ECC (95).
ALERTED_XIDS = (48, 62, 64, 74, 79, 95, 119, 120)

# (metric name, help, DeviceReading attribute); every one a gauge with the identity labels only.
_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "utilization_ratio",
        "Fraction of the sample period a kernel was running (NVML utilization.gpu).",
        "utilization_ratio",
    ),
    (
        "memory_utilization_ratio",
        "Fraction of the sample period device memory was read or written.",
        "memory_utilization_ratio",
    ),
    ("memory_used_bytes", "Device memory in use, excluding driver-reserved memory.", "memory_used_bytes"),
    ("memory_total_bytes", "Device memory installed.", "memory_total_bytes"),
    ("memory_reserved_bytes", "Device memory reserved by the driver.", "memory_reserved_bytes"),
    ("power_watts", "Power draw.", "power_watts"),
    ("power_limit_watts", "Enforced power limit.", "power_limit_watts"),
    ("temperature_celsius", "GPU core temperature.", "temperature_celsius"),
    ("fan_speed_ratio", "Fan speed as a fraction of its maximum.", "fan_speed_ratio"),
    ("sm_clock_hertz", "Current SM clock.", "sm_clock_hertz"),
    ("memory_clock_hertz", "Current memory clock.", "memory_clock_hertz"),
    ("sm_clock_max_hertz", "Maximum SM clock.", "sm_clock_max_hertz"),
    ("performance_state", "Performance state (0 = P0, fastest; 15 = slowest).", "performance_state"),
    (
        "pcie_tx_bytes_per_second",
        "PCIe transmit throughput over NVML's 20 ms sample window.",
        "pcie_tx_bytes_per_second",
    ),
    (
        "pcie_rx_bytes_per_second",
        "PCIe receive throughput over NVML's 20 ms sample window.",
        "pcie_rx_bytes_per_second",
    ),
    (
        "pcie_link_generation",
        "Current PCIe link generation (may drop at idle to save power).",
        "pcie_link_generation",
    ),
    (
        "pcie_link_width",
        "Current PCIe link width in lanes (below the maximum = degraded link).",
        "pcie_link_width",
    ),
    (
        "pcie_link_max_generation",
        "Maximum PCIe link generation of the GPU and slot.",
        "pcie_link_max_generation",
    ),
    ("pcie_link_max_width", "Maximum PCIe link width in lanes.", "pcie_link_max_width"),
    ("ecc_enabled", "1 when ECC is on.", "ecc_enabled"),
    (
        "remapped_rows_correctable",
        "Memory rows remapped after correctable errors.",
        "remapped_rows_correctable",
    ),
    (
        "remapped_rows_uncorrectable",
        "Memory rows remapped after uncorrectable errors.",
        "remapped_rows_uncorrectable",
    ),
    ("row_remap_pending", "1 when a row remap waits for a GPU reset.", "row_remap_pending"),
    ("row_remap_failure", "1 when a row remap failed (an RMA criterion).", "row_remap_failure"),
)
_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("energy_joules", "Energy consumed since the driver was loaded.", "energy_joules"),
    ("pcie_replays", "PCIe replays (link-level retransmissions).", "pcie_replays"),
    (
        "ecc_corrected_errors",
        "Corrected ECC errors since the driver was loaded (volatile).",
        "ecc_corrected_errors",
    ),
    (
        "ecc_uncorrected_errors",
        "Uncorrected ECC errors since the driver was loaded (volatile).",
        "ecc_uncorrected_errors",
    ),
)


def _labels(identity: DeviceIdentity) -> list[str]:
    return [str(identity.index), identity.uuid, identity.name, identity.pci_bus_id]


class GpuCollector:
    """The ``gpu`` collector: renders :class:`GpuPoller` snapshots. Start it to start reading."""

    def __init__(
        self, poller: GpuPoller, *, expected: bool = True, clock: Callable[[], float] = time.time
    ) -> None:
        self.poller = poller
        # False: a host without a driver is not applicable rather than failing (see collect()), and
        # the poller says so at info, not as a warning.
        self.expected = expected
        poller.expected = expected
        self._clock = clock
        self._cache: tuple[GpuSnapshot, object, list[Metric]] | None = None
        poller.on_publish = self._prepare

    @property
    def max_age_seconds(self) -> float:
        return 2 * self.poller.interval + self.poller.timeout

    def start(self) -> None:
        self.poller.start()

    def stop(self, timeout: float) -> None:
        self.poller.stop(timeout)

    def last_success_timestamp(self) -> float | None:
        return self.poller.snapshot.last_success_timestamp

    def health(self) -> GpuHealth:
        """What the load breaker reads: temperatures and throttling from the latest snapshot."""
        return GpuHealth.of(self.poller.snapshot)

    def collect(self) -> Iterator[Metric]:
        families, problems = self._families()
        yield from families
        if problems:
            snap = self.poller.snapshot
            # Only a host that never showed a GPU: one that had GPUs and lost its driver is failing.
            if not self.expected and snap.status in NO_DRIVER and snap.most_devices_seen == 0:
                raise NotApplicable(
                    f"no NVIDIA GPU or driver here (nvml {snap.status}); the launch needs none "
                    "([collectors.gpu] expected = true makes this a failure)"
                )
            raise CollectionFailed("; ".join(problems))

    def _prepare(self) -> None:
        """After each cycle, in the poller's thread: build and render the families scrapes will serve."""
        families, _ = self._families()
        render_families(families, "text")
        render_families(families, "openmetrics")

    def _families(self) -> tuple[list[Metric], tuple[str, ...]]:
        snap = self.poller.snapshot
        now = self._clock()
        problems: list[str] = []
        if snap.status != "ok":
            problems.append(f"nvml {snap.status}" + (f": {snap.detail}" if snap.detail else ""))
        if snap.visible_devices < snap.most_devices_seen:
            problems.append(f"{snap.visible_devices} of {snap.most_devices_seen} GPUs visible")
        if snap.cycle_timestamp and now - snap.cycle_timestamp > self.max_age_seconds:
            # No number that grows each scrape: the reason is logged when it changes.
            problems.append(f"no gpu cycle in the last {self.max_age_seconds:g} s")

        fresh: list[tuple[DeviceIdentity, DeviceReading]] = []
        for state in snap.devices:
            reading = state.reading
            if state.ok and reading is not None and now - reading.timestamp <= self.max_age_seconds:
                fresh.append((state.identity, reading))
            else:
                why = state.error or "stale"
                problems.append(f"gpu {state.identity.index}: {why}")
        xid_counts, xid_times = self.poller.xid_counts()
        # Same snapshot, same fresh GPUs, same XIDs: the very same family objects, whose
        # rendering is cached with them (render.py) — most scrapes render nothing.
        key = (
            tuple(identity.uuid for identity, _ in fresh),
            tuple(problems),
            tuple(sorted(xid_times.items())),
        )
        cached = self._cache
        if cached is not None and cached[0] is snap and cached[1] == key:
            return cached[2], key[1]
        families = [
            *self._status_families(snap),
            *self._health_families(snap, fresh, xid_counts, xid_times),
            *self._reading_families(fresh),
        ]
        self._cache = (snap, key, families)
        return families, key[1]

    def _status_families(self, snap: GpuSnapshot) -> Iterable[Metric]:
        status = GaugeMetricFamily(
            "sentinel_gpu_nvml_status",
            "NVML state: 1 on the series whose status label says it (ok, library_not_found, "
            "driver_not_loaded, init_timeout, gpu_is_lost, no_devices, ...).",
            labels=["status"],
        )
        status.add_metric([snap.status], 1.0)
        yield status
        yield GaugeMetricFamily(
            "sentinel_gpu_visible_devices", "GPUs NVML reports now.", value=snap.visible_devices
        )
        yield GaugeMetricFamily(
            "sentinel_gpu_expected_devices",
            "Most GPUs NVML has reported since start; fewer visible now means one fell off the bus.",
            value=snap.most_devices_seen,
        )
        if snap.cycle_duration_seconds is not None:
            yield GaugeMetricFamily(
                "sentinel_gpu_cycle_duration_seconds",
                "Wall time of the latest background cycle over all GPUs.",
                value=snap.cycle_duration_seconds,
            )
        yield CounterMetricFamily(
            "sentinel_gpu_nvml_inits", "Successful NVML initialisations.", value=snap.inits_total
        )
        yield CounterMetricFamily(
            "sentinel_gpu_nvml_init_failures", "Failed NVML initialisations.", value=snap.init_failures_total
        )

    def _health_families(
        self,
        snap: GpuSnapshot,
        fresh: list[tuple[DeviceIdentity, DeviceReading]],
        xid_counts: dict[tuple[str, int], int],
        xid_times: dict[tuple[str, int], float],
    ) -> Iterable[Metric]:
        info = GaugeMetricFamily(
            "sentinel_gpu_info",
            "Identity of each GPU (constant 1).",
            labels=[*_ID, "vbios_version", "driver_version", "cuda_driver_version"],
        )
        success = GaugeMetricFamily(
            "sentinel_gpu_read_success",
            "1 when the latest background read of this GPU succeeded.",
            labels=_ID,
        )
        last = GaugeMetricFamily(
            "sentinel_gpu_last_read_timestamp_seconds",
            "When the latest good background read of this GPU ended (series are served from it).",
            labels=_ID,
        )
        duration = GaugeMetricFamily(
            "sentinel_gpu_read_duration_seconds",
            "How long the latest good read of this GPU took.",
            labels=_ID,
        )
        fresh_uuids = {identity.uuid for identity, _ in fresh}
        for state in snap.devices:
            labels = _labels(state.identity)
            info.add_metric(
                [*labels, state.identity.vbios_version, snap.driver_version, snap.cuda_driver_version], 1.0
            )
            success.add_metric(labels, 1.0 if state.identity.uuid in fresh_uuids else 0.0)
            if state.reading is not None:
                last.add_metric(labels, state.reading.timestamp)
                duration.add_metric(labels, state.reading.duration_seconds)
        yield info
        yield success
        yield last
        yield duration

        ids = snap.identities
        failures = CounterMetricFamily(
            "sentinel_gpu_read_failures",
            "Background reads of a GPU that failed, by reason (timeout, stuck, gpu_is_lost, ...).",
            labels=[*_ID, "reason"],
        )
        for (uuid, reason), count in sorted(snap.read_failures_total.items()):
            if uuid in ids:
                failures.add_metric([*_labels(ids[uuid]), reason], count)
        yield failures
        field_errors = CounterMetricFamily(
            "sentinel_gpu_field_errors",
            "NVML calls that failed for a reason other than 'not supported' (field absent that cycle).",
            labels=[*_ID, "field", "error"],
        )
        for (uuid, fname, err), count in sorted(snap.field_errors_total.items()):
            if uuid in ids:
                field_errors.add_metric([*_labels(ids[uuid]), fname, err], count)
        yield field_errors
        xid = CounterMetricFamily(
            "sentinel_gpu_xid_errors",
            "XID critical errors reported by the driver, by XID.",
            labels=[*_ID, "xid"],
        )
        xid_last = GaugeMetricFamily(
            "sentinel_gpu_xid_last_timestamp_seconds", "When this XID last occurred.", labels=[*_ID, "xid"]
        )
        for (uuid, code), count in sorted(xid_counts.items()):
            labels = [*_labels(ids[uuid]), str(code)] if uuid in ids else ["", uuid, "", "", str(code)]
            xid.add_metric(labels, count)
            xid_last.add_metric(labels, xid_times[(uuid, code)])
        # The XIDs the shipped alert pages for are at 0 on every GPU from start, so a first XID
        # 48 is an increase Prometheus sees (a series born at 1 is not). Other XIDs appear with
        # their first event; GpuXidCritical also catches a series' first appearance.
        for uuid in sorted(ids):
            for code in ALERTED_XIDS:
                if (uuid, code) not in xid_counts:
                    xid.add_metric([*_labels(ids[uuid]), str(code)], 0)
        yield xid
        yield xid_last

    def _reading_families(self, fresh: list[tuple[DeviceIdentity, DeviceReading]]) -> Iterable[Metric]:
        labelled = [(_labels(identity), reading) for identity, reading in fresh]
        for name, doc, attr in _GAUGES:
            family = GaugeMetricFamily(f"sentinel_gpu_{name}", doc, labels=_ID)
            for labels, reading in labelled:
                value = getattr(reading, attr)
                if value is not None:
                    family.add_metric(labels, value)
            if family.samples:
                yield family
        for name, doc, attr in _COUNTERS:
            counter = CounterMetricFamily(f"sentinel_gpu_{name}", doc, labels=_ID)
            for labels, reading in labelled:
                value = getattr(reading, attr)
                if value is not None:
                    counter.add_metric(labels, value)
            if counter.samples:
                yield counter
        events = GaugeMetricFamily(
            "sentinel_gpu_clock_event_active",
            "1 while this clock-event (throttle) reason holds the clocks down; supported reasons only.",
            labels=[*_ID, "reason"],
        )
        violation = CounterMetricFamily(
            "sentinel_gpu_clock_limited_seconds",
            "Time the clocks were held below the requested level by this policy (NVML violation time).",
            labels=[*_ID, "policy"],
        )
        procs = GaugeMetricFamily(
            "sentinel_gpu_process_memory_used_bytes",
            "Device memory used by each compute process (host PIDs).",
            labels=[*_ID, "pid", "process"],
        )
        for labels, reading in labelled:
            for reason, active in (reading.clock_events or {}).items():
                events.add_metric([*labels, reason], 1.0 if active else 0.0)
            for policy, seconds in reading.violation_seconds.items():
                violation.add_metric([*labels, policy], seconds)
            for proc in reading.processes or ():
                procs.add_metric([*labels, str(proc.pid), proc.process], float(proc.used_bytes))
        families: tuple[Metric, ...] = (events, violation, procs)
        for extra in families:
            if extra.samples:
                yield extra


@register("gpu", section=lambda settings: settings.collectors.gpu)
def _factory(cfg: GpuSettings) -> GpuCollector:
    poller = GpuPoller(
        nvml_backend(cfg),
        interval=cfg.interval_seconds,
        timeout=cfg.timeout_seconds,
        init_timeout=cfg.init_timeout_seconds,
        pcie_throughput=cfg.pcie_throughput,
        processes=cfg.processes,
        xid_events=cfg.xid_events,
    )
    # Unset (a collector set built without Settings.with_gpu_expectation): the cautious reading.
    return GpuCollector(poller, expected=cfg.expected is not False)
