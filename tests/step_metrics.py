"""`StepMetrics`: trainer hooks that keep each step's metrics, for tests that compare two runs step by
step (a straight run against one interrupted and resumed)."""

from trainers.step.hooks import Hooks


class StepMetrics(Hooks):
    def __init__(self):
        self.steps: dict[int, dict[str, float]] = {}

    def on_step(self, step, metrics):
        self.steps[step] = metrics
