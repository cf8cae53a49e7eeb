"""Celery tasks. (Stub: the runner work fills this in.)"""


def send_run_message(run_id: int, attempt: int, queue: str) -> None:
    """Put one 'execute run `run_id`, attempt `attempt`' message on `queue`."""
    raise NotImplementedError
