"""Run execution on Celery workers (one job per module):

tasks        the Celery tasks: `execute_run` (supervised attempt), the reaper
services     what users do to runs: launch, cancel, pause, resume, retry (web, API and admin)
supervisor   what `execute_run` does: CAS to running, trainer child, heartbeat thread, stop escalation
stalls       where a quiet trainer is stuck: the stall watch, its phases and Python stacks (SIGUSR1)
attempt      inside the trainer child (`manage.py execute_run`): train, then the final status
db_hooks     `DatabaseHooks`: the trainer's reports written to the database, batched
control      `DatabaseControl`: pause / cancel / attempt checks read from the database
recovery     `reap_stale_runs`: requeue or fail runs whose worker was lost
beat         the periodic schedule; the scheduler runs the reaper in-process
workers      the Worker registry (Celery signals + a heartbeat thread); shutdown flag
demo         the demo account `serve` creates
procs        process helpers (PDEATHSIG, process groups, log tails)
"""
