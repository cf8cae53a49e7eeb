"""How long a step of an experiment takes, shown beside Launch and on each demo before anyone
starts an hour-long run by mistake.

Measured first: the median `timing/step_s` of the experiment's newest run that reported steps, on
this platform's own workers (the median leaves out the first step's compile). Before any run, a demo
shows the figure measured on a 2-core CPU (`runner.demo.CPU_STEP_S`), said as such; on an
accelerator it says that figure is a CPU's.

`accelerator_present` decides the demos' order (runner.demo.demo_rank): settings.PLATFORM_ACCELERATOR
("auto", "cpu", "gpu" or "tpu"); "auto" looks, once per process and without JAX, for an NVIDIA GPU
or a TPU on the web server's host (`trainers.devices.host_accelerator`), which with `serve` is the
workers' host too.
"""

from __future__ import annotations

import statistics

from django.conf import settings

from experiments.models import MetricPoint, Run
from runner.demo import CPU_MEASURED_ON, DEMO_USERNAME, cpu_step_s, is_demo_name
from trainers.devices import host_accelerator

STEP_METRIC = "timing/step_s"


def accelerator_present() -> bool:
    setting = str(getattr(settings, "PLATFORM_ACCELERATOR", "auto")).strip().lower()
    if setting in ("gpu", "tpu"):
        return True
    if setting == "cpu":
        return False
    return host_accelerator() is not None


def measured_step_s(experiment) -> tuple[float, Run, int] | None:
    """(median seconds a step, the run, how many steps) of the experiment's newest run with steps."""
    run = (
        Run.objects.filter(experiment=experiment, metric_points__name=STEP_METRIC)
        .order_by("-created_at", "-pk")
        .first()
    )
    if run is None:
        return None
    values = [
        v
        for v in MetricPoint.objects.filter(run=run, name=STEP_METRIC, value__isnull=False).values_list(
            "value", flat=True
        )
        if v == v and v not in (float("inf"), float("-inf"))
    ]
    if not values:
        return None
    return statistics.median(values), run, len(values)


def seconds_text(seconds: float) -> str:
    """ "0.4 ms", "3.2 ms", "45 ms", "0.8 s", "12 s", "3.5 min", "1.2 h": a step under 0.1 s in
    milliseconds (a toy model's step on a GPU would read "0.0 s")."""
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 0.1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def expected_step_text(experiment, on_accelerator: bool | None = None) -> str | None:
    """What to show beside Launch: the measured time a step, else a demo's CPU figure, else None."""
    measured = measured_step_s(experiment)
    if measured is not None:
        seconds, run, steps = measured
        return f"about {seconds_text(seconds)} a step here (median of {steps} step{'s' * (steps != 1)} of run {run.pk})"
    owner = experiment.owner.get_username() if experiment.owner_id else ""
    reference = cpu_step_s(experiment.name) if owner == DEMO_USERNAME and is_demo_name(experiment.name) else None
    if reference is None:
        return None
    low, high = reference
    span = seconds_text(low) if low == high else f"{seconds_text(low)} to {seconds_text(high)}"
    if accelerator_present() if on_accelerator is None else on_accelerator:
        return f"not measured here yet; on {CPU_MEASURED_ON}: {span} a step (an accelerator is faster)"
    return f"about {span} a step on {CPU_MEASURED_ON} (measured; not run here yet)"
