"""One run over several processes (hosts): joining them with `jax.distributed` before any JAX work.

`initialize_from_environment()` is the first thing `python -m trainers run` does. It decides, from the
environment only, whether this process is one of several that form a run:

  1. GRPO_COORDINATOR_ADDRESS (host:port of process 0's coordinator), GRPO_NUM_PROCESSES and
     GRPO_PROCESS_ID set (the platform's Ray launcher sets them; GRPO_LOCAL_DEVICE_IDS optional,
     comma-separated): join those processes;
  2. else a cluster that JAX recognises (SLURM under `srun`, Open MPI's `mpirun`, a Kubernetes
     indexed job: `jax._src.clusters`) with more than one process: `jax.distributed.initialize()`
     without arguments, which reads the same variables (the coordinator port can be set with
     JAX_COORDINATOR_PORT);
  3. else nothing: one process, today's program.

Every process then sees every process's devices in `jax.devices()` (a mesh may span them all) and
its own in `jax.local_devices()`. Processes share fate: each sends heartbeats to the coordinator,
and when one stops (a killed or crashed process) the others abort after GRPO_HEARTBEAT_TIMEOUT_S
(default 10 s) instead of hanging in a collective. A coordinator that does not answer, or processes
that never join, fail after GRPO_INIT_TIMEOUT_S (default 120 s) with a `DistributedInitError` naming
the address and the variables to check.

What each process does: the same program on the same data. Every process loads the config and
the dataset, draws the same keys from `seed` and walks the same data positions, so every process
computes the same rollout; a batch becomes a global array through `host.put`, where each process
transfers only the slices its own devices hold (`jax.make_array_from_callback`, the same global
array as `jax.make_array_from_process_local_data` with each process's slice); results come back whole
to every process through `host.to_host` (generated tokens, log-probs, `params_digest`), and metrics
are replicated scalars. Only process 0 reports (`trainers.step.hooks`); checkpoints are written by
all processes together, each its own shards (Orbax), into the one run directory (a filesystem all
hosts share), and restore onto any process count.

On CPU the cross-process collectives are gloo's (TCP), unless JAX_CPU_COLLECTIVES_IMPLEMENTATION
says otherwise.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import jax

COORDINATOR_ENV = "GRPO_COORDINATOR_ADDRESS"
NUM_PROCESSES_ENV = "GRPO_NUM_PROCESSES"
PROCESS_ID_ENV = "GRPO_PROCESS_ID"
LOCAL_DEVICE_IDS_ENV = "GRPO_LOCAL_DEVICE_IDS"
INIT_TIMEOUT_ENV = "GRPO_INIT_TIMEOUT_S"
HEARTBEAT_TIMEOUT_ENV = "GRPO_HEARTBEAT_TIMEOUT_S"

DEFAULT_INIT_TIMEOUT_S = 120
DEFAULT_HEARTBEAT_TIMEOUT_S = 10
SHUTDOWN_TIMEOUT_S = 30  # at exit, how long a process waits for the others to exit too


class DistributedInitError(RuntimeError):
    """The processes of a run could not join; the message names the variable or address to check."""


def _int_env(name: str, default: int | None = None, minimum: int = 0) -> int | None:
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise DistributedInitError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise DistributedInitError(f"{name}={value} must be >= {minimum}")
    return value


def explicit_settings() -> dict | None:
    """The GRPO_* variables as initialize() keyword arguments, or None when GRPO_COORDINATOR_ADDRESS
    is unset. Raises DistributedInitError when they are incomplete or malformed."""
    address = os.environ.get(COORDINATOR_ENV, "").strip()
    if not address:
        return None
    if ":" not in address:
        raise DistributedInitError(f"{COORDINATOR_ENV}={address!r} must be host:port (process 0's coordinator)")
    num_processes = _int_env(NUM_PROCESSES_ENV, minimum=1)
    process_id = _int_env(PROCESS_ID_ENV, minimum=0)
    if num_processes is None or process_id is None:
        missing = [n for n, v in ((NUM_PROCESSES_ENV, num_processes), (PROCESS_ID_ENV, process_id)) if v is None]
        raise DistributedInitError(
            f"{COORDINATOR_ENV} is set but {' and '.join(missing)} not: set all three (or none, for one process)"
        )
    if process_id >= num_processes:
        raise DistributedInitError(f"{PROCESS_ID_ENV}={process_id} must be below {NUM_PROCESSES_ENV}={num_processes}")
    settings = {"coordinator_address": address, "num_processes": num_processes, "process_id": process_id}
    ids = os.environ.get(LOCAL_DEVICE_IDS_ENV, "").strip()
    if ids:
        try:
            settings["local_device_ids"] = [int(i) for i in ids.split(",")]
        except ValueError:
            raise DistributedInitError(f"{LOCAL_DEVICE_IDS_ENV}={ids!r} must be comma-separated integers") from None
    return settings


def detected_cluster() -> tuple[str, int] | None:
    """(name, process count) of the cluster environment `jax.distributed.initialize()` would pick
    without arguments (the same search: JAX's ClusterEnv types that are not opt-in), or None."""
    # lazy: JAX internals, read only when a multi-process run starts
    from jax._src import clusters

    for env in clusters.ClusterEnv._cluster_types:
        if env.opt_in_only_method or not env.is_env_present():
            continue
        return env.__name__, int(env.get_process_count())
    return None


def wait_for_coordinator(address: str, timeout_s: float) -> None:
    """Wait until something listens at `address` (host:port), trying every 0.5 s for `timeout_s`;
    raises DistributedInitError naming GRPO_COORDINATOR_ADDRESS when nothing does."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return
        except (OSError, ValueError) as exc:
            if time.monotonic() >= deadline:
                raise DistributedInitError(
                    f"{COORDINATOR_ENV}={address}: no coordinator answered within {INIT_TIMEOUT_ENV}="
                    f"{timeout_s:g} s ({exc}); start process 0 first, or fix the address"
                ) from None
        time.sleep(0.5)


def initialize_from_environment() -> tuple[int, int]:
    """Join this process to the others of its run, as the environment says (module docstring);
    returns (process_index, process_count): (0, 1) for a run of one process.

    Must run before anything else touches JAX's backends (jax.devices(), an array, a jit call):
    raises DistributedInitError otherwise, and when the processes cannot join in time."""
    if jax.distributed.is_initialized():
        return jax.process_index(), jax.process_count()
    settings = explicit_settings()
    where = f"{COORDINATOR_ENV}={settings['coordinator_address']}" if settings else ""
    if settings is None:
        cluster = detected_cluster()
        if cluster is None or cluster[1] <= 1:
            return 0, 1
        settings, where = {}, f"the {cluster[0]} environment's coordinator ({cluster[1]} processes)"
    # lazy: JAX internals, read only when a multi-process run starts
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise DistributedInitError(
            "jax.distributed must be initialised before any other JAX call in the process "
            "(something already used jax.devices() or an array)"
        )
    if "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in os.environ:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    init_timeout_s = _int_env(INIT_TIMEOUT_ENV, DEFAULT_INIT_TIMEOUT_S, minimum=1)
    started = time.monotonic()
    if settings.get("process_id", 0) > 0:
        wait_for_coordinator(settings["coordinator_address"], init_timeout_s)
    # JAX's runtime aborts the process (SIGABRT, "DEADLINE_EXCEEDED ... RegisterTask") when the
    # processes do not all join in time: this line, printed first, says what it was waiting for.
    print(
        f"[info] joining the run's processes through {where} (waiting up to {INIT_TIMEOUT_ENV}={init_timeout_s} s "
        "for all of them)",
        file=sys.stderr,
        flush=True,
    )
    try:
        jax.distributed.initialize(
            **settings,
            initialization_timeout=max(1, init_timeout_s - int(time.monotonic() - started)),
            heartbeat_timeout_seconds=_int_env(HEARTBEAT_TIMEOUT_ENV, DEFAULT_HEARTBEAT_TIMEOUT_S, minimum=1),
            shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S,
        )
    except Exception as exc:  # the runtime's errors are XlaRuntimeError / ValueError with long texts
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DistributedInitError(
            f"could not join the run's processes through {where} within {INIT_TIMEOUT_ENV}={init_timeout_s} s: "
            f"{first_line}. Check that process 0 is running and its address is reachable, and that every "
            f"process was started with the same process count"
        ) from exc
    return jax.process_index(), jax.process_count()


def is_main_process() -> bool:
    """Process 0: the one that reports (hooks, files, logs) for the whole run."""
    return jax.process_index() == 0
