"""System metrics reported beside a step's training metrics, at low frequency.

Names and units (see `trainers.config.metric_names.SYSTEM_METRICS`):

- `system/cpu_percent`: the host's CPU use since the previous sample, 0-100 (psutil, all cores);
- `system/host_memory_used_bytes`: the host's memory in use (psutil: total - available);
- `system/process_rss_bytes`: this process's resident memory;
- `system/device_memory_bytes`, `system/device_memory_peak_bytes`: accelerator memory in use and its
  peak since the process started, summed over this process's local devices (JAX's
  `Device.memory_stats()`: `bytes_in_use`, `peak_bytes_in_use`). On CPU `memory_stats()` is None:
  then the two are left out, never faked as 0;
- `system/gpu_utilization`: mean GPU utilisation, 0-100, over the GPUs this process sees (NVML via
  nvidia-ml-py), only where the package imports and NVML finds a GPU.

Every call here is cheap (no device synchronisation, no array transfer): a CPU step is not slowed.
`SystemMetricsSampler.maybe_sample(step)` returns the metrics at most once per step and at most once
per `every_s` seconds (0 = every step), else {}.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import jax
import psutil

log = logging.getLogger(__name__)

CPU_PERCENT = "system/cpu_percent"
HOST_MEMORY_USED_BYTES = "system/host_memory_used_bytes"
PROCESS_RSS_BYTES = "system/process_rss_bytes"
DEVICE_MEMORY_BYTES = "system/device_memory_bytes"
DEVICE_MEMORY_PEAK_BYTES = "system/device_memory_peak_bytes"
GPU_UTILIZATION = "system/gpu_utilization"


def host_metrics(psutil_module: Any, process: Any) -> dict[str, float]:
    """CPU percent, host memory in use and the process's RSS from psutil (or a stand-in with the
    same calls: `cpu_percent(interval=None)`, `virtual_memory()`, `process.memory_info()`)."""
    memory = psutil_module.virtual_memory()
    return {
        CPU_PERCENT: float(psutil_module.cpu_percent(interval=None)),
        HOST_MEMORY_USED_BYTES: float(memory.total - memory.available),
        PROCESS_RSS_BYTES: float(process.memory_info().rss),
    }


def device_memory_metrics(devices: Iterable[Any]) -> dict[str, float]:
    """Memory in use and peak, summed over `devices` that report memory stats ({} when none does,
    as on CPU where `memory_stats()` is None)."""
    in_use = peak = 0
    reported = False
    for device in devices:
        try:
            stats = device.memory_stats()
        except Exception:  # noqa: BLE001 - a backend without the call: nothing to report
            stats = None
        if not stats or "bytes_in_use" not in stats:
            continue
        reported = True
        in_use += int(stats["bytes_in_use"])
        peak += int(stats.get("peak_bytes_in_use", stats["bytes_in_use"]))
    return {DEVICE_MEMORY_BYTES: float(in_use), DEVICE_MEMORY_PEAK_BYTES: float(peak)} if reported else {}


def gpu_utilization(nvml: Any, indexes: list[int]) -> dict[str, float]:
    """Mean utilisation (percent) of the NVML devices at `indexes` ({} when there are none)."""
    if not indexes:
        return {}
    values = [float(nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(i)).gpu) for i in indexes]
    return {GPU_UTILIZATION: sum(values) / len(values)}


def visible_gpu_indexes(device_count: int, cuda_visible_devices: str | None) -> list[int]:
    """NVML indexes of the GPUs this process sees: CUDA_VISIBLE_DEVICES's integers when it lists
    them (ids outside the host's count dropped), else all `device_count`."""
    if cuda_visible_devices is not None and cuda_visible_devices.strip():
        parts = [p.strip() for p in cuda_visible_devices.split(",")]
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts if int(p) < device_count]
    return list(range(device_count))


def _nvml() -> tuple[Any, list[int]] | None:
    """pynvml (from nvidia-ml-py) initialised, and the visible GPUs' indexes; None without a GPU."""
    try:
        # lazy: NVML only where a GPU may be; absent on CPU-only installs
        import pynvml

        pynvml.nvmlInit()
        indexes = visible_gpu_indexes(pynvml.nvmlDeviceGetCount(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    except Exception:  # noqa: BLE001 - not installed, no driver, no GPU: no utilisation metric
        return None
    return (pynvml, indexes) if indexes else None


class SystemMetricsSampler:
    """Samples the system metrics at most once per step and once per `every_s` seconds.

    psutil_module, process, devices, nvml: stand-ins for tests (default: psutil, this process,
    `jax.local_devices()`, NVML when a GPU is present); clock: monotonic seconds."""

    def __init__(
        self,
        every_s: float,
        *,
        psutil_module: Any = None,
        process: Any = None,
        devices: Callable[[], Iterable[Any]] | None = None,
        nvml: tuple[Any, list[int]] | None | str = "auto",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.every_s = every_s
        self.clock = clock
        psutil_module = psutil if psutil_module is None else psutil_module
        self.psutil = psutil_module
        self.process = process if process is not None else psutil_module.Process()
        self.devices = jax.local_devices if devices is None else devices
        self.nvml = _nvml() if nvml == "auto" else nvml
        self.last_sample_at: float | None = None
        self.last_step: int | None = None
        self.psutil.cpu_percent(interval=None)  # the first call only starts psutil's CPU interval

    def sample(self) -> dict[str, float]:
        """All metrics now (a failing part is logged and left out: metrics never stop a run)."""
        metrics: dict[str, float] = {}
        parts: list[Callable[[], dict[str, float]]] = [
            lambda: host_metrics(self.psutil, self.process),
            lambda: device_memory_metrics(self.devices()),
        ]
        if self.nvml is not None:
            parts.append(lambda: gpu_utilization(*self.nvml))
        for part in parts:
            try:
                metrics.update(part())
            except Exception:  # noqa: BLE001
                log.warning("a system metric could not be read", exc_info=True)
        return metrics

    def maybe_sample(self, step: int) -> dict[str, float]:
        """The metrics when due at `step` (never twice for one step), else {}."""
        now = self.clock()
        if step == self.last_step:
            return {}
        if self.last_sample_at is not None and now - self.last_sample_at < self.every_s:
            return {}
        self.last_sample_at, self.last_step = now, step
        return self.sample()
