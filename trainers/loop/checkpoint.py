"""Orbax checkpoints of a run: params, optimizer state, and a JSON `meta` item holding the data
position, RNG seed material and counters.

Layout: `<run_dir>/checkpoints/<step>/{params,opt_state,meta}`; directory names are step numbers.
Orbax writes each checkpoint into a temporary directory and renames it only when complete, so a
kill during a save leaves the previous checkpoint usable (the partial one is ignored and cleaned
up when the next manager opens the directory).

Retention: the newest `keep_last` checkpoints, plus the best one by `keep_best_metric` if set.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import AnyPreservationPolicy, BestN, LatestN


class Checkpointer:
    def __init__(
        self,
        directory: str | os.PathLike,
        keep_last: int = 3,
        best_metric: str | None = None,
        best_mode: str = "max",
    ):
        self.directory = os.path.abspath(os.fspath(directory))
        policies: list[Any] = [LatestN(n=keep_last)]
        if best_metric is not None:
            policies.append(BestN(
                get_metric_fn=lambda metrics: metrics[best_metric],
                reverse=best_mode == "min",  # BestN keeps the tail of the sorted list
                n=1,
                keep_checkpoints_without_metrics=False,
            ))
        self._best_metric = best_metric
        options = ocp.CheckpointManagerOptions(
            preservation_policy=AnyPreservationPolicy(policies),
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("params", "opt_state", "meta")
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def path(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def save(self, step: int, params: Any, opt_state: Any, meta: dict, metrics: dict[str, float]) -> str:
        """Write checkpoint `step` synchronously and apply retention; returns its directory."""
        tracked = {k: float(v) for k, v in metrics.items()}
        if self._best_metric is not None and self._best_metric not in tracked:
            tracked = {}  # no value for the metric: keep it only as one of the newest
        self._manager.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                opt_state=ocp.args.StandardSave(opt_state),
                meta=ocp.args.JsonSave(meta),
            ),
            metrics=tracked or None,
            force=True,
        )
        self._manager.wait_until_finished()
        return self.path(step)

    def restore(self, step: int, params_like: Any, opt_state_like: Any) -> tuple[Any, Any, dict]:
        """Restore checkpoint `step` into the structures of `params_like` / `opt_state_like`."""
        abstract = lambda tree: jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)  # noqa: E731
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract(params_like)),
                opt_state=ocp.args.StandardRestore(abstract(opt_state_like)),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return restored["params"], restored["opt_state"], dict(restored["meta"])

    def restore_params(self, step: int, params_like: Any) -> Any:
        """Only the params of checkpoint `step`, into the structure of `params_like` (arrays or
        jax.ShapeDtypeStruct leaves)."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params_like)
        restored = self._manager.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract)))
        return restored["params"]

    def size_bytes(self, step: int) -> int:
        total = 0
        for root, _, files in os.walk(self.path(step)):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        return total

    def close(self) -> None:
        self._manager.close()


def restore_params_at(step_dir: str | os.PathLike, params_like: Any) -> Any:
    """Only the params of one finished checkpoint directory `step_dir` (`<run_dir>/checkpoints/<step>`,
    e.g. another run's), into the structure of `params_like`. Read-only: it opens no checkpoint manager
    over the folder (which would clean up, or apply retention to, a live run's checkpoints)."""
    params_dir = os.path.join(os.path.abspath(os.fspath(step_dir)), "params")
    if not os.path.isdir(params_dir):
        raise FileNotFoundError(f"{step_dir} is not a checkpoint directory (it has no params/)")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params_like)
    with ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(params_dir, abstract)
