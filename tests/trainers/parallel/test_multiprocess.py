"""One run over several processes (trainers.parallel.distributed): two local processes with SLURM's
variables set form one mesh, share one control decision, and train the same three steps as one
process with all the devices.

Each process is a `subprocess.Popen` in its own session; every test kills what it started (the whole
process group) when it ends, passes or fails, so no process outlives a failed or timed-out test."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest
import yaml

from tests.conftest import ROOT, xla_flags_with_devices
from trainers.config import parse_config
from trainers.loop.run_files import RunFilesHooks
from trainers.loop.trainer import GRPOTrainer, params_digest, train
from trainers.parallel import distributed
from trainers.step.hooks import Action, Control, ProcessSharedControl, most_urgent, shared_control

DISTRIBUTED_ENV = (
    "GRPO_COORDINATOR_ADDRESS",
    "GRPO_NUM_PROCESSES",
    "GRPO_PROCESS_ID",
    "GRPO_LOCAL_DEVICE_IDS",
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "OMPI_MCA_orte_hnp_uri",
    "KUBERNETES_SERVICE_HOST",
    "JAX_COORDINATOR_PORT",
    "JAX_COORDINATOR_ADDRESS",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_env(process_id: int, count: int, devices_per_process: int, port: int) -> dict:
    """The environment `srun -n COUNT` gives task `process_id` on one node (plus the coordinator port)."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env.update(
        {
            "XLA_FLAGS": xla_flags_with_devices(devices_per_process),
            "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": ROOT,
            "PYTHONUNBUFFERED": "1",
            "SLURM_JOB_ID": "4242",
            "SLURM_STEP_NODELIST": "localhost",
            "SLURM_NTASKS": str(count),
            "SLURM_PROCID": str(process_id),
            "SLURM_LOCALID": str(process_id),
            "JAX_COORDINATOR_PORT": str(port),  # SLURM's default port comes from the job id: may be taken here
            "GRPO_INIT_TIMEOUT_S": "120",
        }
    )
    return env


class Processes:
    """Started processes, all killed (their process groups) by `kill_all`."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, args: list[str], env: dict, log_path) -> subprocess.Popen:
        log = open(log_path, "w")
        process = subprocess.Popen(
            args, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.started.append(process)
        return process

    def wait_all(self, timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        codes = []
        for process in self.started:
            try:
                codes.append(process.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill_all()
                pytest.fail(f"process {process.args} still running after {timeout_s} s (killed)")
        return codes

    def kill_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()


@pytest.fixture
def processes():
    started = Processes()
    yield started
    started.kill_all()


def _logs(paths) -> str:
    return "\n".join(f"--- {p}\n{open(p).read()[-4000:]}" for p in paths)


# -- the environment's contract, without starting processes ---------------------------------------


def test_one_process_without_cluster_variables(monkeypatch):
    for name in DISTRIBUTED_ENV:
        monkeypatch.delenv(name, raising=False)
    assert distributed.explicit_settings() is None
    assert distributed.detected_cluster() is None
    assert distributed.initialize_from_environment() == (0, 1)


def test_slurm_variables_are_detected_as_a_cluster(monkeypatch):
    for name in DISTRIBUTED_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in _process_env(1, 2, 2, 1234).items():
        if name.startswith("SLURM_"):
            monkeypatch.setenv(name, value)
    assert distributed.detected_cluster() == ("SlurmCluster", 2)
    monkeypatch.setenv("SLURM_NTASKS", "1")  # one task: nothing to join
    assert distributed.detected_cluster() == ("SlurmCluster", 1)


def test_explicit_variables_and_their_errors(monkeypatch):
    for name in DISTRIBUTED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GRPO_COORDINATOR_ADDRESS", "10.0.0.1:7777")
    with pytest.raises(distributed.DistributedInitError, match="GRPO_NUM_PROCESSES and GRPO_PROCESS_ID"):
        distributed.explicit_settings()
    monkeypatch.setenv("GRPO_NUM_PROCESSES", "2")
    monkeypatch.setenv("GRPO_PROCESS_ID", "2")
    with pytest.raises(distributed.DistributedInitError, match="GRPO_PROCESS_ID=2 must be below GRPO_NUM_PROCESSES=2"):
        distributed.explicit_settings()
    monkeypatch.setenv("GRPO_PROCESS_ID", "1")
    monkeypatch.setenv("GRPO_LOCAL_DEVICE_IDS", "0,1")
    assert distributed.explicit_settings() == {
        "coordinator_address": "10.0.0.1:7777",
        "num_processes": 2,
        "process_id": 1,
        "local_device_ids": [0, 1],
    }
    monkeypatch.setenv("GRPO_COORDINATOR_ADDRESS", "10.0.0.1")
    with pytest.raises(distributed.DistributedInitError, match="must be host:port"):
        distributed.explicit_settings()


def test_a_coordinator_that_does_not_answer_names_the_variable():
    port = _free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(distributed.DistributedInitError) as error:
        distributed.wait_for_coordinator(f"127.0.0.1:{port}", timeout_s=1)
    assert f"GRPO_COORDINATOR_ADDRESS=127.0.0.1:{port}" in str(error.value)
    assert "GRPO_INIT_TIMEOUT_S=1" in str(error.value)
    assert time.monotonic() - started >= 1
    with socket.socket() as listening:  # something listens: no wait
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        distributed.wait_for_coordinator(f"127.0.0.1:{listening.getsockname()[1]}", timeout_s=1)


def test_the_most_urgent_request_wins():
    assert most_urgent([Action.CONTINUE, Action.PAUSE]) is Action.PAUSE
    assert most_urgent([Action.PAUSE, Action.STOP, Action.CONTINUE]) is Action.STOP
    assert most_urgent([Action.CONTINUE, Action.CONTINUE]) is Action.CONTINUE
    assert most_urgent([]) is Action.CONTINUE


def test_shared_control_in_one_process_is_the_control_itself():
    control = Control()
    assert shared_control(control) is control

    class Pausing(Control):
        def poll(self):
            return Action.PAUSE

    assert ProcessSharedControl(Pausing()).poll() is Action.PAUSE  # the all-gather of one process
    assert ProcessSharedControl(Control()).poll() is Action.CONTINUE


# -- two processes -------------------------------------------------------------------------------

MESH_SCRIPT = textwrap.dedent("""
    import json, sys
    from trainers.parallel.distributed import initialize_from_environment
    index, count = initialize_from_environment()
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from trainers.step.hooks import Action, Control, shared_control
    from trainers.parallel.host import put, to_host
    from trainers.parallel.mesh import make_mesh

    mesh = make_mesh(jax.devices(), {"fsdp": len(jax.devices())})
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    a = put(x, NamedSharding(mesh, P("fsdp")))       # each process places only its devices' rows
    column_sums = jax.jit(lambda a: (2 * a).sum(axis=0), out_shardings=NamedSharding(mesh, P()))(a)
    total = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, P()))(a)

    class OnlyProcessOneAsks(Control):   # process 1 asks for a pause at its third poll, process 0 never
        polls = 0
        def poll(self):
            self.polls += 1
            return Action.PAUSE if index == 1 and self.polls == 3 else Action.CONTINUE

    control = shared_control(OnlyProcessOneAsks())
    decisions = [control.poll().value for _ in range(4)]
    print("RESULT " + json.dumps({
        "index": index, "count": count, "devices": len(jax.devices()), "local_devices": len(jax.local_devices()),
        "rows_here": sorted(s.index[0].start for s in a.addressable_shards),
        "column_sums": np.asarray(column_sums).tolist(), "total": float(total),
        "gathered": to_host(a).tolist(), "decisions": decisions,
    }), flush=True)
""")


def test_two_slurm_processes_form_one_mesh_and_reduce_an_fsdp_array(tmp_path, processes):
    script = tmp_path / "mesh_worker.py"
    script.write_text(MESH_SCRIPT)
    port = _free_port()
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    for i in range(2):
        processes.start([sys.executable, str(script)], _process_env(i, 2, 2, port), logs[i])
    codes = processes.wait_all(timeout_s=240)
    assert codes == [0, 0], _logs(logs)
    results = []
    for log in logs:
        lines = [line for line in open(log) if line.startswith("RESULT ")]
        assert len(lines) == 1, _logs(logs)
        results.append(json.loads(lines[0][len("RESULT ") :]))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    for i, r in enumerate(results):
        assert (r["index"], r["count"], r["devices"], r["local_devices"]) == (i, 2, 4, 2)
        assert r["rows_here"] == ([0, 2] if i == 0 else [4, 6])  # fsdp 4: two rows per device
        assert r["column_sums"] == (2 * x).sum(axis=0).tolist() == [224.0, 240.0, 256.0, 272.0]
        assert r["total"] == 496.0
        assert r["gathered"] == x.tolist()
        # process 1's pause request reaches both at the same poll
        assert r["decisions"] == ["continue", "continue", "pause", "continue"]


RUN_CONFIG = {
    "model": {"preset": "tiny"},
    # one optimizer update per step (no old-policy pass) of two accumulated micro-batches; beta > 0:
    # reference log-probs, and every group trains (without KL, flat groups would be skipped)
    "batch": {"prompts_per_step": 4, "mini_batch_prompts": 4, "train_micro_batch_sequences": 8},
    "grpo": {"num_generations": 4, "num_iterations": 1, "beta": 0.04},
    "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 0.5},  # see tests/trainers/parallel/test_mesh.py
    "train": {"max_steps": 3},
    "checkpoint": {"every_steps": 2, "keep_last": 1},
    "mesh": {"fsdp": 4, "tensor": 2},
}
COMPARED = ("loss/policy", "loss/kl", "kl", "grad_norm", "entropy", "clip_fraction", "reward/mean")


def test_two_processes_train_as_one_process_with_all_devices(tmp_path, processes):
    """`python -m trainers run` in 2 processes x 4 CPU devices on fsdp 4 x tensor 2 = the same run in
    this process on its 8 devices: losses, gradient norms and parameters within 1e-5; process 0 alone
    writes metrics.jsonl (each step once) and summary.json; both write the checkpoints, which this
    one process restores."""
    config_path = tmp_path / "cfg.yaml"
    config_path.write_text(yaml.safe_dump(RUN_CONFIG))
    multi_dir = tmp_path / "two_processes"
    port = _free_port()
    logs = [tmp_path / f"run{i}.log" for i in range(2)]
    for i in range(2):
        processes.start(
            [sys.executable, "-m", "trainers", "run", str(config_path), "--out", str(multi_dir)],
            _process_env(i, 2, 4, port),
            logs[i],
        )
    codes = processes.wait_all(timeout_s=420)
    assert codes == [0, 0], _logs(logs)
    assert "succeeded: step 3" in open(logs[0]).read()
    assert "succeeded" not in open(logs[1]).read()  # process 1 prints nothing of the run's own

    single_dir = tmp_path / "one_process"
    config = parse_config(RUN_CONFIG)
    assert len(jax.devices()) == 8
    single = train(config, str(single_dir), hooks=RunFilesHooks(str(single_dir)))

    rows = [json.loads(line) for line in open(multi_dir / "metrics.jsonl")]
    expected = [json.loads(line) for line in open(single_dir / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3]  # written once, by process 0
    for row, base in zip(rows, expected):
        np.testing.assert_allclose(
            [row[k] for k in COMPARED], [base[k] for k in COMPARED], rtol=0, atol=1e-5, err_msg=f"step {row['step']}"
        )
    summary = json.load(open(multi_dir / "summary.json"))
    assert (summary["status"], summary["final_step"]) == ("succeeded", 3)
    assert sorted(os.listdir(multi_dir / "checkpoints")) == ["3"]  # keep_last 1 removed step 2's
    shards = sorted(os.listdir(multi_dir / "checkpoints" / "3" / "params"))
    assert "ocdbt.process_0" in shards and "ocdbt.process_1" in shards  # each process wrote its shards

    # the 2-process checkpoint restores in this one process, onto the same mesh
    multi_params, single_params = _final_params(multi_dir, config), _final_params(single_dir, config)
    for (path, leaf), base in zip(
        jax.tree_util.tree_flatten_with_path(multi_params)[0], jax.tree.leaves(single_params)
    ):
        np.testing.assert_allclose(
            np.asarray(leaf), np.asarray(base), rtol=0, atol=1e-5, err_msg=jax.tree_util.keystr(path)
        )
    assert params_digest(multi_params) == summary["params_digest"]
    assert params_digest(single_params) == single.params_digest


def _final_params(run_dir, config):
    """The params of the run's newest checkpoint (step 3), on the config's mesh in this process."""
    trainer = GRPOTrainer(config, str(run_dir))
    assert trainer.restore_latest() == 3
    return trainer.state.params


PAUSE_SCRIPT = textwrap.dedent("""
    import json, sys
    from trainers.parallel.distributed import initialize_from_environment
    index, count = initialize_from_environment()
    import yaml
    from trainers.config import parse_config
    from trainers.step.hooks import Action, Control
    from trainers.loop.run_files import RunFilesHooks
    from trainers.loop.trainer import train

    class ProcessZeroPausesAtItsSecondPoll(Control):   # process 1's control never asks anything
        polls = 0
        def poll(self):
            self.polls += 1
            return Action.PAUSE if index == 0 and self.polls == 2 else Action.CONTINUE

    config = parse_config(yaml.safe_load(open(sys.argv[1])))
    # every process is handed file hooks: the trainer lets only process 0 call them
    result = train(config, sys.argv[2], hooks=RunFilesHooks(sys.argv[2]), control=ProcessZeroPausesAtItsSecondPoll())
    print("RESULT " + json.dumps({"index": index, "status": result.status, "final_step": result.final_step}),
          flush=True)
""")


def test_a_pause_on_process_zero_pauses_every_process_at_the_same_step(tmp_path, processes):
    """Process 0's control asks for a pause before step 2; both processes stop after step 1, write
    its checkpoint together and return "paused"; only process 0 wrote metrics.jsonl."""
    script = tmp_path / "pause_worker.py"
    script.write_text(PAUSE_SCRIPT)
    config_path = tmp_path / "cfg.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {**RUN_CONFIG, "mesh": {"data": 2, "fsdp": 2}, "train": {"max_steps": 3}, "checkpoint": {"every_steps": 0}}
        )
    )
    run_dir = tmp_path / "run"
    port = _free_port()
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    for i in range(2):
        processes.start(
            [sys.executable, str(script), str(config_path), str(run_dir)], _process_env(i, 2, 2, port), logs[i]
        )
    assert processes.wait_all(timeout_s=420) == [0, 0], _logs(logs)
    results = [
        json.loads([line for line in open(log) if line.startswith("RESULT ")][0][len("RESULT ") :]) for log in logs
    ]
    assert [(r["index"], r["status"], r["final_step"]) for r in results] == [(0, "paused", 1), (1, "paused", 1)]
    assert [json.loads(line)["step"] for line in open(run_dir / "metrics.jsonl")] == [1]
    assert os.listdir(run_dir / "checkpoints") == ["1"]
    shards = os.listdir(run_dir / "checkpoints" / "1" / "params")
    assert "ocdbt.process_0" in shards and "ocdbt.process_1" in shards


HEARTBEAT_SCRIPT = textwrap.dedent("""
    import time
    from trainers.parallel.distributed import initialize_from_environment
    index, count = initialize_from_environment()
    import numpy as np
    from jax.experimental import multihost_utils
    for i in range(100000):   # one small collective every 0.1 s, as a training loop would
        multihost_utils.process_allgather(np.int32(i))
        if i == 3:
            print("JOINED", flush=True)
        time.sleep(0.1)
""")


def test_when_one_process_dies_the_other_ends_too(tmp_path, processes):
    """Shared fate: process 1 is killed (SIGKILL) in the middle of the run; process 0 does not hang in
    its next collective but exits with an error (the coordinator's heartbeat timeout, 10 s)."""
    script = tmp_path / "heartbeat_worker.py"
    script.write_text(HEARTBEAT_SCRIPT)
    port = _free_port()
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    survivor, victim = (
        processes.start([sys.executable, str(script)], _process_env(i, 2, 1, port), logs[i]) for i in range(2)
    )
    deadline = time.monotonic() + 180
    while "JOINED" not in open(logs[1]).read():
        assert victim.poll() is None and time.monotonic() < deadline, _logs(logs)
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    try:
        code = survivor.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("process 0 still runs 120 s after process 1 was killed:\n" + _logs(logs))
    assert code != 0


def _explicit_env(process_id: int, port: int, init_timeout_s: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env.update(
        {
            "XLA_FLAGS": xla_flags_with_devices(1),
            "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": ROOT,
            "GRPO_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "GRPO_NUM_PROCESSES": "2",
            "GRPO_PROCESS_ID": str(process_id),
            "GRPO_INIT_TIMEOUT_S": str(init_timeout_s),
        }
    )
    return env


def test_processes_that_never_join_end_with_a_message_naming_the_address(tmp_path, processes):
    """`python -m trainers run` as process 1 of 2 with no coordinator: exit 1, one line naming
    GRPO_COORDINATOR_ADDRESS; as process 0 with no process 1: it ends after GRPO_INIT_TIMEOUT_S, having
    said what it waited for."""
    config_path = tmp_path / "cfg.yaml"
    config_path.write_text(yaml.safe_dump(RUN_CONFIG))
    port = _free_port()
    command = [sys.executable, "-m", "trainers", "run", str(config_path), "--out", str(tmp_path / "run")]
    logs = [tmp_path / "alone1.log", tmp_path / "alone0.log"]
    processes.start(command, _explicit_env(1, port, 2), logs[0])
    processes.start(command, _explicit_env(0, _free_port(), 2), logs[1])
    codes = processes.wait_all(timeout_s=120)
    assert codes[0] == 1, _logs(logs)
    assert (
        f"run: GRPO_COORDINATOR_ADDRESS=127.0.0.1:{port}: no coordinator answered within GRPO_INIT_TIMEOUT_S=2 s"
        in open(logs[0]).read()
    )
    assert codes[1] != 0, _logs(logs)
    said = open(logs[1]).read()
    assert "joining the run's processes through GRPO_COORDINATOR_ADDRESS=127.0.0.1:" in said
    assert "GRPO_INIT_TIMEOUT_S=2" in said and "DEADLINE_EXCEEDED" in said
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")


def test_asynchronous_grpo_is_refused_in_a_run_of_several_processes(monkeypatch, tmp_path):
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    config = parse_config({"model": {"preset": "tiny"}, "async": {"enabled": True}})
    with pytest.raises(ValueError, match="async.enabled: asynchronous GRPO runs in one process only"):
        GRPOTrainer(config, str(tmp_path / "run"))
