"""Signals other apps listen to, so that lower layers never import them.

`run_status_changed(sender=Run, run=run, status=to)`: sent after every status change that won its
compare-and-set (`Run.transition`, the reaper's), in whichever process made it (web, worker,
trainer child). Receivers must be cheap and must not raise: alerts and sweeps enqueue work on commit.
"""

from django.dispatch import Signal

run_status_changed = Signal()
