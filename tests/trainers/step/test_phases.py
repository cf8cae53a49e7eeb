"""trainers.step.phases: the phase marker each thread keeps, the SIGUSR1 stack dump of every thread,
and the watcher's reading of both (what each thread is in and waits on)."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from trainers.step import phases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def installed(tmp_path):
    marker, stacks = str(tmp_path / "logs" / "attempt-1.phase.json"), str(tmp_path / "logs" / "attempt-1.stacks.txt")
    phases.install(marker, stacks)
    yield marker, stacks
    phases.uninstall()


def test_phases_nest_per_thread_and_close_on_an_exception():
    with phases.phase("step", "3"):
        with phases.phase("generation"):
            assert phases.current() == ["step 3", "generation"]
            other = []
            worker = threading.Thread(target=lambda: other.append(phases.current()))
            worker.start()
            worker.join()
            assert other == [[]]  # another thread's phases are its own
        with pytest.raises(ValueError):
            with phases.phase("training"):
                raise ValueError("boom")
        assert phases.current() == ["step 3"]
    assert phases.current() == []


def test_the_marker_file_follows_every_phase_change(installed):
    marker, _ = installed
    written = phases.read(marker)
    assert written["pid"] == os.getpid() and written["stacks_signal"] == "SIGUSR1" and written["threads"] == []
    with phases.phase("checkpoint", "step 2"):
        threads = phases.read(marker)["threads"]
        assert [(t["ident"], t["name"], [p["name"] for p in t["phases"]]) for t in threads] == [
            (phases.thread_id(threading.get_ident()), "MainThread", ["checkpoint"])
        ]
        assert threads[0]["phases"][0]["detail"] == "step 2"
    assert phases.read(marker)["threads"] == []
    phases.uninstall()
    with phases.phase("generation"):
        assert phases.read(marker)["threads"] == []  # no longer written


STAND_IN = textwrap.dedent("""
    import sys, threading, time
    sys.path.insert(0, {root!r})
    from trainers.step import phases

    phases.install({marker!r}, {stacks!r})

    def running_the_sandbox():
        with phases.phase("rewards", "8 programs"):
            time.sleep(600)

    def sleeping_in_generation():
        with phases.phase("step", "3"), phases.phase("generation"):
            time.sleep(600)

    threading.Thread(target=running_the_sandbox, name="reward-pool", daemon=True).start()
    sleeping_in_generation()
""")


def test_a_process_asleep_in_a_named_phase_dumps_every_threads_stack_with_its_phase(tmp_path):
    """A stand-in trainer sleeps inside "step 3 > generation" while a second thread is in "rewards":
    SIGUSR1 appends both threads' stacks to the stacks file without stopping it, and the reading
    names each thread, its phases and what it waits on."""
    marker, stacks = str(tmp_path / "m.json"), str(tmp_path / "stacks.txt")
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN.format(root=ROOT, marker=marker, stacks=stacks)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            written = phases.read(marker) or {}
            depths = {t["name"]: len(t["phases"]) for t in written.get("threads", [])}
            if depths == {"MainThread": 2, "reward-pool": 1}:  # "step 3 > generation" entered, and "rewards"
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the stand-in never entered both phases: {phases.read(marker)}")
        time.sleep(0.2)  # both threads are inside time.sleep now
        proc.send_signal(phases.STACKS_SIGNAL)
        deadline = time.monotonic() + 30
        while "sleeping_in_generation" not in (open(stacks).read() if os.path.exists(stacks) else ""):
            assert time.monotonic() < deadline, "no stack dump"
            time.sleep(0.05)
        time.sleep(0.2)
        assert proc.poll() is None  # the dump does not stop the process
        dump = open(stacks).read()
    finally:
        proc.kill()
        proc.wait()
    threads = phases.parse_stacks(dump)
    functions = {t.ident: [f for _, _, f in t.frames] for t in threads}
    main = next(t for t in written["threads"] if t["name"] == "MainThread")
    pool = next(t for t in written["threads"] if t["name"] == "reward-pool")
    assert "sleeping_in_generation" in functions[main["ident"]]
    assert "running_the_sandbox" in functions[pool["ident"]]
    annotated = phases.annotate(dump, written).splitlines()
    header = next(i for i, line in enumerate(annotated) if main["ident"] in line.lower())
    assert annotated[header + 1].startswith("  [thread MainThread; in step 3 > generation (for ")
    summary = phases.summary(threads, written).splitlines()
    assert summary[0].startswith("MainThread: in step 3 > generation (for ")
    assert summary[0].endswith(", waiting on generation")
    assert summary[1].startswith("reward-pool: in rewards 8 programs (for ")
    assert summary[1].endswith(", waiting on the reward functions (a judge model, the sandbox's programs)")


@pytest.mark.parametrize(
    "file, phase, expected",
    [
        ("/venv/lib/python3.11/site-packages/jax/_src/compiler.py", "generation", "XLA compilation"),
        ("/repo/trainers/sandbox/runner.py", "generation", "the sandbox (code-test programs)"),
        ("/venv/site-packages/jax/experimental/multihost_utils.py", "step", "the other hosts of the gang"),
        ("/venv/site-packages/orbax/checkpoint/manager.py", "checkpoint", "a checkpoint write"),
        ("/repo/trainers/engine/batching.py", "rollout wait", "rollouts from the collector thread"),
        ("/repo/trainers/engine/batching.py", "", ""),
    ],
)
def test_what_a_thread_waits_on_comes_from_its_stack_first_then_its_phase(file, phase, expected):
    frames = [("/usr/lib/python3.11/threading.py", 320, "wait"), (file, 10, "f"), ("/repo/x.py", 1, "<module>")]
    assert phases.waits_on(frames, [{"name": phase}] if phase else []) == expected


def test_a_thread_missing_from_the_dump_is_still_named_by_its_phase():
    marker = {"threads": [{"ident": "0x01", "name": "collector", "phases": [{"name": "generation", "since": 100.0}]}]}
    assert phases.summary([], marker, now=130.0) == "collector: in generation (for 30 s), waiting on generation"


def test_stacks_of_a_dump_are_read_thread_by_thread():
    dump = textwrap.dedent("""\
        Thread 0x00007f0000000002 (most recent call first):
          File "/usr/lib/python3.11/threading.py", line 320 in wait
          File "/repo/trainers/rollout/collector.py", line 150 in run

        Current thread 0x00007f0000000001 (most recent call first):
          File "/venv/site-packages/jax/_src/compiler.py", line 300 in backend_compile_and_load
          File "/repo/trainers/loop/trainer.py", line 520 in step
    """)
    threads = phases.parse_stacks(dump)
    assert [(t.ident, t.current, [f for _, _, f in t.frames]) for t in threads] == [
        ("0x00007f0000000002", False, ["wait", "run"]),
        ("0x00007f0000000001", True, ["backend_compile_and_load", "step"]),
    ]
    assert phases.waits_on(threads[1].frames, []) == "XLA compilation"
    assert signal.Signals(phases.STACKS_SIGNAL).name == "SIGUSR1"
