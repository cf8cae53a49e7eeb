"""System metrics (trainers.loop.system_metrics): the sampler's names and units from stand-in
psutil / devices / NVML with hand values, its period, and a toy run's metrics.jsonl carrying them."""

from __future__ import annotations

import json
from types import SimpleNamespace

from trainers.config import parse_config
from trainers.config.metric_names import METRIC_NAMES, SYSTEM_METRICS
from trainers.loop import system_metrics as sm
from trainers.loop.run_files import RunFilesHooks
from trainers.loop.trainer import train

GIB = 1024**3


class FakePsutil:
    def __init__(self):
        self.cpu_calls = 0

    def cpu_percent(self, interval=None):
        assert interval is None  # never blocks
        self.cpu_calls += 1
        return 37.5

    def virtual_memory(self):
        return SimpleNamespace(total=16 * GIB, available=10 * GIB)


class FakeProcess:
    def memory_info(self):
        return SimpleNamespace(rss=512 * 1024**2)


class FakeDevice:
    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


class FakeNvml:
    def __init__(self, utilization_by_index):
        self.utilization_by_index = utilization_by_index

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self.utilization_by_index[handle], memory=0)


def sampler(devices, nvml=None, clock=lambda: 0.0, every_s=10.0):
    return sm.SystemMetricsSampler(
        every_s, psutil_module=FakePsutil(), process=FakeProcess(), devices=lambda: devices, nvml=nvml, clock=clock
    )


def test_host_and_device_metrics_with_hand_values():
    devices = [
        FakeDevice({"bytes_in_use": 3 * GIB, "peak_bytes_in_use": 5 * GIB}),
        FakeDevice({"bytes_in_use": 1 * GIB, "peak_bytes_in_use": 2 * GIB}),
    ]
    metrics = sampler(devices, nvml=(FakeNvml({0: 80, 1: 40, 2: 0}), [0, 1])).sample()
    assert metrics == {
        "system/cpu_percent": 37.5,
        "system/host_memory_used_bytes": float(6 * GIB),  # total 16 - available 10
        "system/process_rss_bytes": float(512 * 1024**2),
        "system/device_memory_bytes": float(4 * GIB),  # 3 + 1, summed over local devices
        "system/device_memory_peak_bytes": float(7 * GIB),  # 5 + 2
        "system/gpu_utilization": 60.0,  # mean of GPUs 0 and 1
    }
    assert set(metrics) == set(SYSTEM_METRICS) and set(SYSTEM_METRICS) <= set(METRIC_NAMES)


def test_on_cpu_device_memory_and_gpu_utilization_are_left_out():
    metrics = sampler([FakeDevice(None), FakeDevice(None)]).sample()  # CPU devices: memory_stats() is None
    assert set(metrics) == {"system/cpu_percent", "system/host_memory_used_bytes", "system/process_rss_bytes"}


def test_a_failing_part_is_left_out_and_the_rest_reported():
    class Broken:
        def memory_stats(self):
            raise RuntimeError("driver gone")

    metrics = sampler([Broken(), FakeDevice({"bytes_in_use": 7, "peak_bytes_in_use": 9})]).sample()
    assert metrics["system/device_memory_bytes"] == 7.0 and metrics["system/device_memory_peak_bytes"] == 9.0
    nvml = SimpleNamespace(nvmlDeviceGetHandleByIndex=lambda i: 1 / 0)
    assert "system/gpu_utilization" not in sampler([], nvml=(nvml, [0])).sample()


def test_visible_gpu_indexes():
    assert sm.visible_gpu_indexes(4, None) == [0, 1, 2, 3]
    assert sm.visible_gpu_indexes(4, "2,0") == [2, 0]
    assert sm.visible_gpu_indexes(2, "1,5") == [1]
    assert sm.visible_gpu_indexes(3, "GPU-3b1c") == [0, 1, 2]  # UUIDs: all of them
    assert sm.visible_gpu_indexes(0, None) == []


def test_period_and_at_most_once_per_step():
    now = [0.0]
    s = sampler([], clock=lambda: now[0], every_s=10.0)
    assert s.maybe_sample(1)  # the first step is sampled
    now[0] = 4.0
    assert s.maybe_sample(2) == {}  # 4 s later: not due
    now[0] = 10.0
    assert s.maybe_sample(3)  # 10 s after the first sample
    assert s.maybe_sample(3) == {}  # never twice for one step
    every_step = sampler([], every_s=0.0)
    assert all(every_step.maybe_sample(step) for step in (1, 2, 3))
    assert every_step.maybe_sample(3) == {}


def test_a_run_reports_system_metrics_in_metrics_jsonl(tmp_path):
    raw = {
        "seed": 0,
        "model": {"preset": "tiny"},
        "data": {"task": "arithmetic", "train_prompts": 8, "eval_prompts": 0},
        "rollout": {"max_new_tokens": 4},
        "batch": {"prompts_per_step": 2},
        "grpo": {"num_generations": 2},
        "train": {"max_steps": 3, "system_metrics_every_s": 0},
        "checkpoint": {"every_steps": 0},
    }
    run_dir = tmp_path / "run"
    train(parse_config(raw), str(run_dir), RunFilesHooks(str(run_dir)))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:  # period 0: every step; on CPU no device memory
        assert 0 <= row["system/cpu_percent"] <= 100
        assert row["system/host_memory_used_bytes"] > 0 and row["system/process_rss_bytes"] > 10 * 1024**2
        assert "system/device_memory_bytes" not in row

    hourly = dict(raw, train={"max_steps": 3, "system_metrics_every_s": 3600})
    train(parse_config(hourly), str(tmp_path / "hourly"), RunFilesHooks(str(tmp_path / "hourly")))
    rows = [json.loads(line) for line in (tmp_path / "hourly" / "metrics.jsonl").read_text().splitlines()]
    assert ["system/process_rss_bytes" in row for row in rows] == [True, False, False]  # the first step only
