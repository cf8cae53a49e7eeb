"""Where a run's arrays live: the training state and batches, and the generator's copy of the weights.

The default `Placement()` is the default device for everything (one device: no mesh, no sharding).
With the meshes of the config's `mesh` section (`trainers.parallel.mesh`):
  - params, optimizer state and reference params are split over the train mesh by the logical-axis
    rules (`trainers.parallel.rules`: FSDP over `fsdp`, heads / MLP width / vocabulary over
    `tensor`), and every update and log-prob micro-batch is split over data x fsdp along its batch
    axis;
  - the generator's weights are on the rollout mesh (or the train mesh, without rollout devices),
    split by the same rules, and each generation call's sequences are split over its data axes.
Traced calls run inside `training()` / `generating()`, which set the mesh that the model's
activation constraints refer to. With separate rollout devices, generation and training overlap.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from trainers.config import ExperimentConfig
from trainers.models.generate import cast_for_generation
from trainers.parallel import rules
from trainers.parallel.host import put
from trainers.parallel.mesh import describe, mesh_context, meshes_for


@dataclasses.dataclass(frozen=True)
class Placement:
    """train_mesh: None = the default device; rollout_mesh: None = generation uses the train mesh."""

    train_mesh: Mesh | None = None
    rollout_mesh: Mesh | None = None
    generation_dtype: str | None = None  # model.dtype: the generator's matrices are kept in it (None: as trained)

    @classmethod
    def from_config(cls, config: ExperimentConfig) -> Placement:
        """The meshes of the config's `mesh` section (MeshError names the field when the devices
        cannot form them)."""
        return cls(*meshes_for(config.mesh), generation_dtype=config.model.dtype)

    @property
    def generation_mesh(self) -> Mesh | None:
        return self.rollout_mesh if self.rollout_mesh is not None else self.train_mesh

    def training(self):
        """Context for traced training work (updates, log-prob passes): the train mesh."""
        return mesh_context(self.train_mesh)

    def generating(self):
        """Context for traced generation work: the rollout mesh (or the train mesh). Thread-local:
        the asynchronous collector enters it in its own thread."""
        return mesh_context(self.generation_mesh)

    def state_shardings(self, tree: Any) -> Any:
        """Shardings of params / optimizer state on the train mesh (None without a mesh)."""
        return None if self.train_mesh is None else rules.state_shardings(tree, self.train_mesh)

    def train_state(self, tree: Any) -> Any:
        """Params, optimizer state or reference params, split over the train mesh."""
        return tree if self.train_mesh is None else jax.device_put(tree, self.state_shardings(tree))

    def init_optimizer(self, optimizer: Any, params: Any) -> Any:
        """optimizer.init(params), its state split like the parameters it belongs to."""
        if self.train_mesh is None:
            return optimizer.init(params)
        with self.training():
            abstract = jax.eval_shape(optimizer.init, params)
            return jax.jit(optimizer.init, out_shardings=rules.state_shardings(abstract, self.train_mesh))(params)

    def train_batch(self, arrays: dict[str, np.ndarray], batch_axis: int) -> dict[str, Any]:
        """An update's (batch_axis 1: [A, M, ...]) or a log-prob pass's (batch_axis 0) inputs, split
        over the train mesh's data x fsdp along the batch axis; as they are on the default device."""
        if self.train_mesh is None:
            return arrays
        return {
            name: put(value, rules.batch_sharding(self.train_mesh, np.shape(value), batch_axis))
            for name, value in arrays.items()
        }

    def generation_weights(self, params: Any) -> Any:
        """`params` as the generator reads them: matrices cast once to `generation_dtype`
        (`generate.cast_for_generation`; the same samples as the float32 weights, half the bytes
        per decode step with bfloat16). Not a copy where nothing is cast: for a generation that
        ends before the trainer's next update (the synchronous source, evaluation)."""
        return cast_for_generation(params, self.generation_dtype)

    def rollout_copy(self, params: Any) -> Any:
        """The generator's own copy of `params` on the rollout mesh (never the trainer's buffers,
        which the next update donates), matrices cast to `generation_dtype` on the train devices
        first (`generation_weights`), so a bfloat16 copy moves half the bytes."""
        cast = self.generation_weights(params)
        mesh = self.generation_mesh
        if mesh is not None:
            return jax.device_put(cast, rules.state_shardings(cast, mesh), may_alias=False)
        return jax.tree.map(lambda new, old: jnp.copy(new) if new is old else new, cast, params)

    def describe(self) -> str:
        rollout = "the train mesh" if self.rollout_mesh is None else describe(self.rollout_mesh)
        return f"train: {describe(self.train_mesh)}; rollout: {rollout}"
