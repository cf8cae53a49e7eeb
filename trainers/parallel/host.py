"""Moving arrays between the host and a mesh that may span several processes.

`put` makes a global array from a host array that every process holds whole (each process places
only the slices its own devices hold); `to_host` brings a (possibly sharded) array back whole to
every process. On one process both are plain transfers.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Sharding


def put(array: np.ndarray, sharding: Sharding) -> jax.Array:
    """A host array (the same on every process) as a global array with `sharding`."""
    array = np.asarray(array)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def to_host(array: jax.Array | np.ndarray) -> np.ndarray:
    """The whole array as numpy, on every process (gathered across processes when this process's
    devices hold only part of it)."""
    if isinstance(array, jax.Array) and not array.is_fully_addressable and not array.is_fully_replicated:
        return np.asarray(multihost_utils.process_allgather(array, tiled=True))
    return np.asarray(array)


def tree_to_host(tree):
    """`to_host` of every array of a pytree, the transfers started together (one wait, not one per
    array) when this process holds them all."""
    leaves = jax.tree_util.tree_leaves(tree)
    if all(not isinstance(leaf, jax.Array) or leaf.is_fully_addressable for leaf in leaves):
        return jax.device_get(tree)
    return jax.tree_util.tree_map(to_host, tree)
