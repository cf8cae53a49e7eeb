"""Where a run's arrays live: the training state and batches, and the generator's copy of the weights.

The default `Placement()` is the default device for everything. With meshes (from
`async.train_devices` / `async.rollout_devices`, used with `async.enabled`):
  - params, optimizer state and reference params are replicated over the train mesh, and every update
    and log-prob micro-batch is split over it along its batch axis (data parallel: XLA adds the
    gradient all-reduce);
  - the generator's weights are replicated over the rollout mesh and each generation call's
    sequences are split over it.
So generation and training run on disjoint devices and overlap. Micro-batch sizes must divide by
the device counts (config validation says which).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainers.config import ExperimentConfig


def device_mesh(index_list: list[int], field: str) -> Mesh | None:
    """A one-axis ("data") mesh over the listed devices; None for an empty list (the default device)."""
    if not index_list:
        return None
    devices = jax.devices()
    missing = [i for i in index_list if i >= len(devices)]
    if missing:
        raise ValueError(f"{field}: device index {missing[0]} is out of range: this process sees {len(devices)} "
                         "device(s) (on a CPU host, XLA_FLAGS=--xla_force_host_platform_device_count=N gives N)")
    return Mesh(np.array([devices[i] for i in index_list]), ("data",))


def replicated(mesh: Mesh | None) -> NamedSharding | None:
    return None if mesh is None else NamedSharding(mesh, PartitionSpec())


def split_along(mesh: Mesh | None, batch_axis: int) -> NamedSharding | None:
    """Arrays split along `batch_axis` over the mesh's devices (data parallel)."""
    return None if mesh is None else NamedSharding(mesh, PartitionSpec(*([None] * batch_axis), "data"))


@dataclasses.dataclass(frozen=True)
class Placement:
    """train_mesh / rollout_mesh: None = the default device."""

    train_mesh: Mesh | None = None
    rollout_mesh: Mesh | None = None

    @classmethod
    def from_config(cls, config: ExperimentConfig) -> "Placement":
        """The async section's device lists when async is enabled; otherwise the default device."""
        a = config.async_
        if not a.enabled:
            return cls()
        return cls(device_mesh(a.train_devices, "async.train_devices"),
                   device_mesh(a.rollout_devices, "async.rollout_devices"))

    def train_state(self, tree: Any) -> Any:
        """Params, optimizer state or reference params, replicated over the train devices."""
        sharding = replicated(self.train_mesh)
        return tree if sharding is None else jax.device_put(tree, sharding)

    def train_batch(self, arrays: dict[str, np.ndarray], batch_axis: int) -> dict[str, Any]:
        """An update's (batch_axis 1: [A, M, ...]) or a log-prob pass's (batch_axis 0) inputs, split
        over the train devices along the batch axis; as they are on the default device."""
        sharding = split_along(self.train_mesh, batch_axis)
        if sharding is None:
            return arrays
        return {name: jax.device_put(value, sharding) for name, value in arrays.items()}

    def rollout_copy(self, params: Any) -> Any:
        """The generator's own copy of `params`, replicated over the rollout devices (never the
        trainer's buffers, which the next update donates)."""
        if self.rollout_mesh is not None:
            return jax.device_put(params, replicated(self.rollout_mesh))
        return jax.tree.map(jnp.copy, params)

    @property
    def prompt_sharding(self) -> NamedSharding | None:
        """Where each generation call's prompts go: split over the rollout devices."""
        return split_along(self.rollout_mesh, 0)

    def describe(self) -> str:
        def ids(mesh: Mesh | None) -> str:
            return "default" if mesh is None else str([d.id for d in mesh.devices.flat])

        return f"rollout devices {ids(self.rollout_mesh)}, train devices {ids(self.train_mesh)}"
