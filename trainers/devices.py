"""What this machine offers the trainer: `python -m trainers devices` prints the JAX version, the
backend JAX chose, every device with its memory, and, when the machine has an accelerator that JAX
did not find (a GPU with the CPU-only jaxlib of `requirements.txt`), the command that installs the
matching build (`./scripts/setup.sh --cuda` or `--tpu`).

`host_accelerator` looks for an accelerator without JAX (the platform orders its demos by it);
`describe` turns what was found into the printed lines (pure, tested with made-up devices);
`probe` imports JAX and finds it.
"""

from __future__ import annotations

import dataclasses
import functools
import os

SETUP_COMMAND = {"gpu": "./scripts/setup.sh --cuda", "tpu": "./scripts/setup.sh --tpu"}


@dataclasses.dataclass(frozen=True)
class Device:
    """One JAX device: `id`, `platform` ("cpu", "gpu", "tpu"), `kind` (JAX's device_kind, e.g.
    "NVIDIA H100 80GB HBM3") and `memory_bytes`, what JAX may allocate on it (None when the backend
    does not say: the CPU's memory is the host's)."""

    id: int
    platform: str
    kind: str
    memory_bytes: int | None


@dataclasses.dataclass(frozen=True)
class Found:
    """What `probe` found: JAX's and jaxlib's versions, the default backend, its devices, the host's
    memory and CPU count, and the accelerator the host has whatever JAX found (`host_accelerator`)."""

    jax_version: str
    jaxlib_version: str
    backend: str
    devices: tuple[Device, ...]
    host_memory_bytes: int
    host_cpus: int
    host_accelerator: str | None


@functools.lru_cache(maxsize=1)
def host_accelerator() -> str | None:
    """ "gpu" when the machine has an NVIDIA GPU (NVML counts one, or /dev/nvidia0 exists), "tpu" when
    it has a TPU (/dev/accel0, a TPU VM's chip), else None. Without JAX; once per process."""
    if os.path.exists("/dev/accel0"):
        return "tpu"
    try:
        # lazy: NVML only where a GPU may be; absent on CPU-only installs
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() > 0:
                return "gpu"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver or no library: look for the device file
        pass
    return "gpu" if os.path.exists("/dev/nvidia0") else None


MEMORY_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
"""Where a control group (a container, a systemd slice) states this process's memory limit: cgroup v2, v1."""


def host_memory_bytes() -> int:
    """The host memory this process may use: the machine's, or its control group's limit when lower."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in MEMORY_LIMIT_FILES:
        try:
            with open(path) as f:
                limit = f.read().strip()
        except OSError:
            continue
        if limit.isdigit():  # "max": no limit
            memory = min(memory, int(limit))
    return memory


def run_memory_bytes() -> int | None:
    """The memory a run's step has: on a CPU this host's (`host_memory_bytes`), on an accelerator
    one device's (its allocator's limit), None when the device does not say. Imports JAX."""
    import jax  # lazy: the rest of this module is JAX-free

    device = jax.local_devices()[0]
    if device.platform == "cpu":
        return host_memory_bytes()
    limit = (device.memory_stats() or {}).get("bytes_limit")
    return int(limit) if limit else None


def gib(size_bytes: int) -> str:
    return f"{size_bytes / 1024**3:.1f} GiB"


def describe(found: Found) -> list[str]:
    """The lines `python -m trainers devices` prints for `found`: versions, backend, one line per
    device, the host, then what to do when JAX runs on the CPU of a machine with an accelerator."""
    lines = [
        f"JAX {found.jax_version} (jaxlib {found.jaxlib_version}), backend: {found.backend}",
        f"devices: {len(found.devices)}",
    ]
    for d in found.devices:
        memory = gib(d.memory_bytes) if d.memory_bytes else "host memory"
        name = d.platform if d.kind.lower() == d.platform else f"{d.platform} {d.kind}"
        lines.append(f"  {d.id}: {name}, {memory}")
    lines.append(f"host: {found.host_cpus} CPUs, {gib(found.host_memory_bytes)}")
    missed = found.host_accelerator
    if found.backend == "cpu" and missed is not None:
        lines.append(
            f"this machine has a {missed.upper()} but JAX runs on the CPU: its jaxlib is the CPU build. "
            f"Run {SETUP_COMMAND[missed]} to install the {missed.upper()} build of the same JAX, "
            f"then run this again."
        )
    elif found.backend == "cpu":
        lines.append("no accelerator: training runs on the CPU (the demos' step times are a CPU's)")
    return lines


def probe() -> Found:
    """Import JAX and report its devices (the first call starts the backend: a second or two)."""
    # lazy: JAX starts its backends on import; `devices` reports the host first
    import jax
    import jaxlib

    devices = []
    for device in jax.devices():
        try:
            stats = device.memory_stats() or {}
        except Exception:  # noqa: BLE001 - a backend without memory statistics
            stats = {}
        devices.append(Device(device.id, device.platform, device.device_kind, stats.get("bytes_limit")))
    return Found(
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.__version__,
        backend=jax.default_backend(),
        devices=tuple(devices),
        host_memory_bytes=host_memory_bytes(),
        host_cpus=os.cpu_count() or 1,
        host_accelerator=host_accelerator(),
    )
