"""Signals other apps listen to, so that lower layers never import them.

`run_status_changed(sender=Run, run=run, status=to)`: sent after every status change that won its
compare-and-set (`Run.transition`, the reaper's), in whichever process made it (web, worker,
trainer child). Receivers must be cheap and must not raise: alerts and sweeps enqueue work on commit.

`metrics_reported(sender=Run, run_id=id, names=frozenset of metric names, step=last step)`: sent by
the trainer's database hooks (runner.db_hooks) in the trainer's process, after each flush of metric
points has committed (at most every flush interval, 0.5 s). Sweeps judge a trial's pruning from it,
so a trial stops within a step of the decision instead of a scheduler tick later. Sent robustly: a
receiver that raises is logged, never breaks the trainer.
"""

from django.dispatch import Signal

run_status_changed = Signal()
metrics_reported = Signal()
