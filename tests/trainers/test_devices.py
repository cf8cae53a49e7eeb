"""`python -m trainers devices` (trainers/devices.py) and the accelerator builds `scripts/setup.sh
--cuda / --tpu` install: what a user on a GPU box sees, with made-up devices, and the pins that keep
the accelerator build the same JAX as requirements.txt."""

import json
import os
import re
import subprocess
import sys

from tests.conftest import ROOT
from trainers import devices
from trainers.devices import Device, Found, describe

GIB = 1024**3


def found(backend, devices, host_accelerator=None):
    return Found(
        jax_version="0.10.2",
        jaxlib_version="0.10.2",
        backend=backend,
        devices=tuple(devices),
        host_memory_bytes=64 * GIB,
        host_cpus=16,
        host_accelerator=host_accelerator,
    )


def test_a_gpu_found_is_listed_with_its_memory_and_no_advice():
    lines = describe(found("gpu", [Device(0, "gpu", "NVIDIA H100 80GB HBM3", int(75.5 * GIB))], "gpu"))
    assert lines == [
        "JAX 0.10.2 (jaxlib 0.10.2), backend: gpu",
        "devices: 1",
        "  0: gpu NVIDIA H100 80GB HBM3, 75.5 GiB",
        "host: 16 CPUs, 64.0 GiB",
    ]


def test_a_gpu_jax_did_not_find_names_the_setup_command():
    """The README's first command on a GPU box gives the CPU jaxlib: the report says which command fixes it."""
    lines = describe(found("cpu", [Device(0, "cpu", "cpu", None)], "gpu"))
    assert lines[2] == "  0: cpu, host memory"
    assert lines[-1].startswith("this machine has a GPU but JAX runs on the CPU")
    assert "Run ./scripts/setup.sh --cuda to install the GPU build" in lines[-1]
    tpu = describe(found("cpu", [Device(0, "cpu", "cpu", None)], "tpu"))
    assert "Run ./scripts/setup.sh --tpu" in tpu[-1]
    plain = describe(found("cpu", [Device(0, "cpu", "cpu", None)], None))
    assert plain[-1].startswith("no accelerator: training runs on the CPU")


def pinned(path, package):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    match = re.search(rf"^{re.escape(package)}(\[[a-z0-9]+\])?==([0-9.]+)\s*$", text, re.MULTILINE)
    assert match, f"{path} pins no {package}"
    return match.group(1), match.group(2)


def test_the_accelerator_builds_are_the_pinned_jax():
    _, version = pinned("requirements.txt", "jax")
    assert pinned("requirements.txt", "jaxlib")[1] == version
    assert pinned("requirements-cuda.txt", "jax") == ("[cuda12]", version)
    assert pinned("requirements-tpu.txt", "jax") == ("[tpu]", version)


def test_setup_takes_cuda_and_tpu_and_refuses_the_unknown():
    script = os.path.join(ROOT, "scripts", "setup.sh")
    usage = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "--cuda" in usage.stdout and "--tpu" in usage.stdout
    bad = subprocess.run(["bash", script, "--gpu"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown option --gpu" in bad.stderr


def test_devices_reports_this_machines_jax():
    out = subprocess.run(
        [sys.executable, "-m", "trainers", "devices", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    import jax

    assert report["jax_version"] == jax.__version__ == pinned("requirements.txt", "jax")[1]
    assert report["backend"] == jax.default_backend()
    assert len(report["devices"]) == jax.device_count() >= 1
    assert report["host_cpus"] == os.cpu_count()


def test_host_memory_is_the_control_groups_limit_when_lower(tmp_path, monkeypatch):
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(devices, "MEMORY_LIMIT_FILES", (str(v2), str(v1)))
    assert devices.host_memory_bytes() == physical  # no control group files
    v2.write_text("max\n")
    assert devices.host_memory_bytes() == physical  # a group without a limit
    v2.write_text(f"{8 * 1024**3}\n")
    assert devices.host_memory_bytes() == 8 * 1024**3
    v1.write_text(f"{physical * 2}\n")  # a limit above the machine's memory changes nothing
    assert devices.host_memory_bytes() == 8 * 1024**3
