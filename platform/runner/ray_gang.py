"""A multi-host run (cluster.hosts > 1): one attempt as a gang of Ray actors, one per host.

The supervisor (runner.supervisor) starts `manage.py execute_gang RUN ATTEMPT` instead of the
single-process trainer; that process is the gang's Ray driver and does, for this attempt:

1. connect: `ray.init(address=PLATFORM_RAY_ADDRESS)`; unset, a local Ray (one node, a small object
   store, no dashboard) that lives as long as this process. An address that does not answer within
   PLATFORM_RAY_CONNECT_TIMEOUT_S (a local Ray not up within PLATFORM_RAY_LOCAL_START_TIMEOUT_S)
   fails the run, naming the setting.
2. reserve: a placement group of cluster.hosts bundles, one per host: {"CPU": 1} (+ {"GPU":
   cluster.devices_per_host} on a cluster with GPUs). STRICT_SPREAD (each bundle on its own node)
   on a real cluster; PACK on the local one-node Ray. Not ready within PLATFORM_RAY_JOIN_TIMEOUT_S:
   the run fails, naming cluster.hosts and the nodes the cluster has.
3. start: one `runner.ray_host.HostProcess` actor per bundle; actor i starts the trainer child
   `manage.py execute_run RUN ATTEMPT` (the single-host entry: runner.attempt) with
   GRPO_COORDINATOR_ADDRESS=<process 0's host>:<free port>, GRPO_NUM_PROCESSES=<hosts>,
   GRPO_PROCESS_ID=<i> (trainers.parallel.distributed joins them; on CPU each child also gets
   XLA_FLAGS=--xla_force_host_platform_device_count=<devices_per_host>). Process 0 reports to the
   database exactly as a single-host run does (hooks, control, final status); the others train
   silently; the trainer gives all of them process 0's cancel/pause decision at the same step.
   Each child's output goes to <run dir>/logs/attempt-N-host-I.log.
4. watch, every PLATFORM_STATUS_POLL_S: a SIGTERM from the supervisor (worker stopping, or a pause
   that takes too long) is passed to process 0 (it checkpoints and pauses the whole gang). When
   any child ends, the others get PROCESS_END_GRACE_S to end too, then SIGKILL; then:
   - every child exited 0: process 0 wrote the final status (nothing to do);
   - a child was killed by a signal this driver did not send, or an actor died (its host or
     process lost): the attempt is lost; a running run is requeued as a new attempt
     (runner.recovery.restart_or_fail: restarts + 1, the whole gang resumes from the newest
     checkpoint), up to the run's max_restarts;
   - else (a child failed in the trainer's code): the run fails with process 0's error
     (runner.attempt leaves it in <run dir>/logs/attempt-N.error) or the failed child's log tail.
   A cancelling or pausing run is left to the supervisor, which ends it cancelled or paused.

The run directory must be one shared folder for every host (checkpoints are written by all
processes together), and every host needs this checkout at the same path with the same Python
environment and the platform's database settings (forwarded from this process's environment).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from experiments.models import ACTIVE_STATUSES, Run, RunStatus
from runner.attempt import error_path, fail_run
from runner.procs import SUPERVISOR_PID_ENV, tail_text
from runner.step_limits import start_refusal
from runner.storage import run_directory

log = logging.getLogger(__name__)
MANAGE_PY = Path(settings.REPO_ROOT) / "manage.py"
LOCAL_OBJECT_STORE_BYTES = 80 * 1024 * 1024  # the gang passes no data through Ray: the minimum will do
PROCESS_END_GRACE_S = 3.0  # below the trainer's heartbeat timeout (GRPO_HEARTBEAT_TIMEOUT_S, 10 s)
RECORD_EVERY_S = 10.0  # how often the cluster's hosts are written for the workers page
FORWARDED_ENV_PREFIXES = ("PLATFORM_", "DJANGO_", "CELERY_", "JAX_", "TRAINERS_", "GRPO_")
FORWARDED_ENV_NAMES = ("DATABASE_URL", "PYTHONUNBUFFERED", "XLA_FLAGS")
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


class GangError(RuntimeError):
    """The gang could not start; the message names the setting or config field to fix."""


def cluster_of(config: dict) -> tuple[int, int | None]:
    """(cluster.hosts, cluster.devices_per_host) of a stored config (plain data; defaults 1, None)."""
    section = config.get("cluster") or {}
    hosts = section.get("hosts") or 1
    return int(hosts), section.get("devices_per_host")


def is_multi_host(run: Run) -> bool:
    return cluster_of(run.config or {})[0] > 1


def host_log_path(run_dir: str, attempt: int, index: int) -> str:
    return os.path.join(run_dir, "logs", f"attempt-{attempt}-host-{index}.log")


def with_device_count(xla_flags: str, devices: int) -> str:
    """`xla_flags` with --xla_force_host_platform_device_count set to `devices` (CPU devices of a process)."""
    kept = [f for f in xla_flags.split() if not f.startswith(DEVICE_COUNT_FLAG)]
    return " ".join([*kept, f"{DEVICE_COUNT_FLAG}={devices}"])


def child_env(
    index: int,
    hosts: int,
    coordinator: str,
    devices_per_host: int | None,
    gpus: bool,
    environ: dict[str, str],
    init_timeout_s: float,
) -> dict[str, str | None]:
    """The environment changes for host `index`'s trainer child (None removes a variable): the
    platform's settings forwarded from this process, the jax.distributed contract
    (trainers.parallel.distributed), and on CPU the device count."""
    changes: dict[str, str | None] = {
        k: v for k, v in environ.items() if k.startswith(FORWARDED_ENV_PREFIXES) or k in FORWARDED_ENV_NAMES
    }
    changes.update(
        {
            SUPERVISOR_PID_ENV: None,  # the child's parent is its actor; it dies with it (ray_host)
            "GRPO_COORDINATOR_ADDRESS": coordinator,
            "GRPO_NUM_PROCESSES": str(hosts),
            "GRPO_PROCESS_ID": str(index),
            "GRPO_INIT_TIMEOUT_S": str(max(1, int(init_timeout_s))),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if gpus:
        if devices_per_host is None:
            changes["CUDA_VISIBLE_DEVICES"] = None  # Ray hides the GPUs of a bundle that asks for none
    elif devices_per_host is not None:
        changes["XLA_FLAGS"] = with_device_count(environ.get("XLA_FLAGS", ""), devices_per_host)
    return changes


@dataclasses.dataclass
class Ending:
    """How a gang's children ended: exit codes by host (None: its actor died), which were killed here."""

    codes: dict[int, int | None]
    lost_actors: dict[int, str]
    killed_here: set[int]

    def lost(self) -> str:
        """Why the attempt counts as lost (a host or process gone), or '' if it does not."""
        for index, why in sorted(self.lost_actors.items()):
            return f"host {index} of the gang lost (its Ray actor died: {why})"
        for index, code in sorted(self.codes.items()):
            if code is not None and code < 0 and index not in self.killed_here:
                return f"trainer process {index} of the gang killed ({_signal_name(-code)})"
        return ""

    def failed(self) -> list[int]:
        return sorted(i for i, code in self.codes.items() if code and i not in self.killed_here)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _check_answers(address: str, timeout_s: float) -> None:
    """A host:port that refuses or does not answer a TCP connection: GangError naming the setting."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", ray://...: left to ray.init
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise GangError(
            f"the Ray cluster at PLATFORM_RAY_ADDRESS={address} does not answer ({exc}); start it "
            "(`ray start --head`) or fix PLATFORM_RAY_ADDRESS (unset: a local Ray on the worker)"
        ) from None


class Gang:
    """The driver of one attempt's gang (see the module docstring)."""

    def __init__(self, run: Run, attempt: int):
        self.run = run
        self.attempt = attempt
        self.hosts, self.devices_per_host = cluster_of(run.config)
        self.address = settings.PLATFORM_RAY_ADDRESS
        self.connect_timeout_s = settings.PLATFORM_RAY_CONNECT_TIMEOUT_S
        self.local_start_timeout_s = settings.PLATFORM_RAY_LOCAL_START_TIMEOUT_S
        self.join_timeout_s = settings.PLATFORM_RAY_JOIN_TIMEOUT_S
        self.poll_s = settings.PLATFORM_STATUS_POLL_S
        self.run_dir = run_directory(run)
        self.gpus = False
        self.group = None
        self.actors: list = []
        self.nodes: list[dict] = []
        self.pids: list[int] = []
        self.signalled: int | None = None  # a signal this process got, to pass to process 0
        self.connected = False
        self.cluster_label = self.address or f"local Ray of run {run.pk}"

    @property
    def where(self) -> str:
        return f"PLATFORM_RAY_ADDRESS={self.address}" if self.address else "a local Ray on this worker"

    # -- 1. connect -----------------------------------------------------------------------------

    def connect(self) -> None:
        import ray

        if self.address:
            _check_answers(self.address, self.connect_timeout_s)
        done = threading.Event()
        # a local Ray starts its own GCS, raylet and workers: on a loaded host that alone can take a minute
        limit_s, setting = (
            (self.connect_timeout_s, "PLATFORM_RAY_CONNECT_TIMEOUT_S")
            if self.address
            else (self.local_start_timeout_s, "PLATFORM_RAY_LOCAL_START_TIMEOUT_S")
        )

        def give_up():  # ray.init can wait for a GCS that never answers for minutes
            if not done.is_set():
                message = (
                    f"cannot connect to the Ray cluster at {self.where} within {setting}="
                    f"{limit_s:g} s; check the address and that the cluster is up"
                )
                print(message, flush=True)
                self._fail(message)
                os._exit(1)

        timer = threading.Timer(limit_s, give_up)
        timer.daemon = True
        timer.start()
        try:
            if self.address:
                ray.init(
                    address=self.address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
                )
            else:
                # "local": a new Ray of our own, never one that `ray start` left on this machine
                ray.init(
                    address="local",
                    num_cpus=self.hosts,
                    num_gpus=0,
                    object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
        except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ... with long texts
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise GangError(
                f"cannot connect to the Ray cluster at {self.where}: {first}; check PLATFORM_RAY_ADDRESS, "
                "that the cluster is up, and for a cluster with token authentication RAY_AUTH_MODE=token "
                "and its token (~/.ray/auth_token or RAY_AUTH_TOKEN) in the worker's environment"
            ) from None
        finally:
            done.set()
            timer.cancel()
        self.connected = True
        self.gpus = ray.cluster_resources().get("GPU", 0) > 0
        self.record_hosts()

    def _fail(self, message: str) -> None:
        fail_run(self.run, self.attempt, message)

    # -- 2. reserve -----------------------------------------------------------------------------

    def bundle(self) -> dict[str, float]:
        bundle = {"CPU": 1.0}
        if self.gpus and self.devices_per_host:
            bundle["GPU"] = float(self.devices_per_host)
        return bundle

    def reserve(self) -> None:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        strategy = "STRICT_SPREAD" if self.address else "PACK"  # the local Ray has one node
        self.group = placement_group(
            [self.bundle()] * self.hosts, strategy=strategy, name=f"run-{self.run.pk}-attempt-{self.attempt}"
        )
        ready, _ = ray.wait([self.group.ready()], timeout=self.join_timeout_s)
        if not ready:
            alive = [n for n in ray.nodes() if n.get("Alive")]
            remove_placement_group(self.group)
            self.group = None
            raise GangError(
                f"cluster.hosts={self.hosts}: the Ray cluster at {self.where} did not find {self.hosts} hosts "
                f"(one bundle {self.bundle()} each, {strategy}) within PLATFORM_RAY_JOIN_TIMEOUT_S="
                f"{self.join_timeout_s:g} s; it has {len(alive)} node(s) alive. Lower cluster.hosts (or "
                "cluster.devices_per_host), or add hosts to the cluster"
            )

    # -- 3. start -------------------------------------------------------------------------------

    def start(self) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from runner import ray_host

        ray.cloudpickle.register_pickle_by_value(ray_host)  # remote hosts need no platform/ on sys.path
        options = {"num_cpus": 1, "max_restarts": 0, "max_concurrency": 1}
        if self.gpus and self.devices_per_host:
            options["num_gpus"] = self.devices_per_host
        actor_class = ray.remote(ray_host.HostProcess)
        self.actors = [
            actor_class.options(
                **options,
                name=None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=i),
            ).remote()
            for i in range(self.hosts)
        ]
        self.nodes = ray.get([a.node.remote() for a in self.actors], timeout=self.join_timeout_s)
        port = ray.get(self.actors[0].free_port.remote(), timeout=self.join_timeout_s)
        coordinator = f"{self.nodes[0]['ip']}:{port}"
        argv_python = sys.executable  # the same environment on every host (module docstring)
        argv = [argv_python, str(MANAGE_PY), "execute_run", str(self.run.pk), str(self.attempt)]
        Path(error_path(self.run_dir, self.attempt)).unlink(missing_ok=True)
        starts = []
        for i, actor in enumerate(self.actors):
            env = child_env(
                i, self.hosts, coordinator, self.devices_per_host, self.gpus, dict(os.environ), self.join_timeout_s
            )
            starts.append(
                actor.start.remote(argv, env, str(settings.REPO_ROOT), host_log_path(self.run_dir, self.attempt, i))
            )
        self.pids = ray.get(starts, timeout=self.join_timeout_s)
        for i, (node, pid) in enumerate(zip(self.nodes, self.pids)):
            print(
                f"host {i}: {node['hostname']} ({node['ip']}), actor pid {node['pid']}, trainer pid {pid}, output in "
                f"{host_log_path(self.run_dir, self.attempt, i)}",
                flush=True,
            )
        self.run.add_event(
            f"multi-host: {self.hosts} hosts through {self.where}; process 0 on "
            f"{self.nodes[0]['hostname']} ({coordinator})",
            kind="system",
        )
        self.record_hosts()

    # -- 4. watch -------------------------------------------------------------------------------

    def poll(self) -> tuple[dict[int, int | None], dict[int, str]]:
        """Each child's exit code (None: running) and the actors that died (index -> why)."""
        import ray
        from ray.exceptions import RayActorError

        codes: dict[int, int | None] = {}
        lost: dict[int, str] = {}
        refs = [a.poll.remote() for a in self.actors]
        for i, ref in enumerate(refs):
            try:
                codes[i] = ray.get(ref, timeout=max(self.poll_s * 20, 10))
            except RayActorError as exc:
                codes[i] = None
                lost[i] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            except ray.exceptions.GetTimeoutError:
                codes[i] = None  # a busy node: ask again next tick
        return codes, lost

    def signal(self, index: int, signum: int) -> None:
        import ray

        try:
            ray.get(self.actors[index].signal.remote(int(signum)), timeout=10)
        except Exception as exc:  # noqa: BLE001 - an actor already gone
            log.info("run %s: cannot signal host %s (%s)", self.run.pk, index, exc)

    def watch(self) -> Ending:
        killed_here: set[int] = set()
        forwarded = False
        recorded_at = time.monotonic()
        ended_at = None
        while True:
            codes, lost = self.poll()
            if self.signalled is not None and not forwarded:
                print(
                    f"{_signal_name(self.signalled)} received: passed to process 0 (checkpoint and pause)", flush=True
                )
                self.signal(0, self.signalled)
                forwarded = True
            running = [i for i, code in codes.items() if code is None and i not in lost]
            if not running:
                return Ending(codes, lost, killed_here)
            if len(running) < self.hosts and ended_at is None:
                ended_at = time.monotonic()
                ended = {i: codes[i] for i in codes if i not in running}
                print(
                    f"process(es) ended: {ended}{'; actors lost: ' + str(lost) if lost else ''}; the others get "
                    f"{PROCESS_END_GRACE_S:g} s to end",
                    flush=True,
                )
            if ended_at is not None and time.monotonic() - ended_at >= PROCESS_END_GRACE_S:
                for i in running:
                    if i not in killed_here:
                        print(f"process {i} still running: SIGKILL", flush=True)
                        self.signal(i, signal.SIGKILL)
                        killed_here.add(i)
            if time.monotonic() - recorded_at >= RECORD_EVERY_S:
                self.record_hosts()
                recorded_at = time.monotonic()
            time.sleep(self.poll_s)

    # -- 5. conclude and clean up ---------------------------------------------------------------

    def conclude(self, ending: Ending) -> int:
        """Act on how the gang ended (module docstring). Returns this process's exit code."""
        from django.db.models import Q

        from runner.recovery import restart_or_fail

        print(
            f"gang ended: exit codes {ending.codes}, actors lost {ending.lost_actors}, killed here "
            f"{sorted(ending.killed_here)}",
            flush=True,
        )
        lost = ending.lost()
        run = Run.objects.filter(pk=self.run.pk).first()
        if run is None or run.attempt != self.attempt or run.status not in ACTIVE_STATUSES:
            return 0  # process 0 wrote the final status (or the run is no longer this attempt's)
        if lost:
            if run.status != RunStatus.RUNNING:
                return 1  # cancelling / pausing: the supervisor ends it so
            action = restart_or_fail(run, lost, Q(status=RunStatus.RUNNING), timezone.now(), what="host lost")
            print(f"{lost}: run {action or 'changed meanwhile'}", flush=True)
            return 0 if action else 1
        failed = ending.failed()
        if failed:
            error = self.error_text(failed)
            self._fail(error)
            return 1
        return 0  # every process exited 0 without a final status: the supervisor says so

    def error_text(self, failed: list[int]) -> str:
        try:
            with open(error_path(self.run_dir, self.attempt), encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            pass
        index = failed[0]
        tail = tail_text(host_log_path(self.run_dir, self.attempt, index), 30)
        return f"trainer process {index} of the gang failed. Last output:\n{tail}".rstrip()

    def stop(self) -> None:
        """Kill every child and actor still there, free the placement group, disconnect."""
        import ray

        if not self.connected:
            return
        for i in range(len(self.actors)):
            self.signal(i, signal.SIGKILL)
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
        if self.group is not None:
            try:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.group)
            except Exception:  # noqa: BLE001
                pass
        self.clear_processes()
        ray.shutdown()
        self.connected = False

    # -- the workers page ------------------------------------------------------------------------

    def record_hosts(self) -> None:
        """Write the Ray cluster's nodes (and which of this gang's processes run where) for the
        workers page (runner.models.RayHost)."""
        import ray

        from runner.models import RayHost

        try:
            processes: dict[str, list[dict]] = {}
            for i, node in enumerate(self.nodes):
                processes.setdefault(node["node_id"], []).append(
                    {"run": self.run.pk, "process": i, "devices": self.devices_per_host}
                )
            RayHost.record(self.cluster_label, ray.nodes(), self.run.pk, processes)
        except Exception:  # noqa: BLE001 - display only
            log.warning("run %s: cannot record the Ray cluster's hosts", self.run.pk, exc_info=True)

    def clear_processes(self) -> None:
        from runner.models import RayHost

        try:
            RayHost.forget_run(self.cluster_label, self.run.pk, drop_cluster=not self.address)
        except Exception:  # noqa: BLE001 - display only
            log.warning("run %s: cannot update the Ray hosts", self.run.pk, exc_info=True)


def run_gang(run_id: int, attempt: int) -> int:
    """Drive attempt `attempt` of multi-host run `run_id` (module docstring). Returns an exit code."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.attempt != attempt or run.status not in ACTIVE_STATUSES:
        log.warning("run %s attempt %s is not active; nothing to do", run_id, attempt)
        return 0
    refusal = start_refusal(run.config, run.experiment.owner)  # before a local Ray starts a process per host
    if refusal:
        print(refusal, flush=True)
        fail_run(run, attempt, refusal)
        return 1
    gang = Gang(run, attempt)

    def on_signal(signum, frame):
        gang.signalled = signum

    def catch_signals():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)

    catch_signals()
    try:
        try:
            gang.connect()
            catch_signals()  # again: ray.init installs its own (fatal) SIGTERM handler
            gang.reserve()
            gang.start()
        except GangError as exc:
            print(str(exc), flush=True)
            gang._fail(str(exc))
            return 1
        ending = gang.watch()
        return gang.conclude(ending)
    finally:
        gang.stop()
