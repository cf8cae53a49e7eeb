"""Signals other apps listen to, so that lower layers never import them.

`run_status_changed(sender=Run, run=run, status=to)`: sent after every status change that won its
compare-and-set (`Run.transition`, the reaper's), in whichever process made it (web, worker,
trainer child). Receivers must be cheap and must not raise: alerts and sweeps enqueue work on commit.

`metrics_reported(sender=Run, run_id=id, names=frozenset of metric names, step=last step)`: sent by
the trainer's database hooks (runner.db_hooks) in the trainer's process, after each flush of metric
points has committed (at most every flush interval, 0.5 s). Sweeps judge a trial's pruning from it,
so a trial stops within a step of the decision instead of a scheduler tick later. Sent robustly: a
receiver that raises is logged, never breaks the trainer.

`run_stalled(sender=Run, run_id=id, attempt=n, key=str, report=runner.stalls.StallReport)`: sent by
the supervisor (runner.supervisor, in the worker's process) when a running trainer has reported
nothing for several times its usual step time, after it wrote the report (the trainer's phases and
Python stacks) into the run's log. `key` names the stall once ("stalled:<attempt>:step-<step>:<n>").
The alerts app records its `stalled` notifications from it. Receivers must be cheap and must not raise.
"""

from django.dispatch import Signal

run_status_changed = Signal()
metrics_reported = Signal()
run_stalled = Signal()
