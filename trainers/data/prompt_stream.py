"""The prompt stream: dataset items epoch after epoch, reshuffled per epoch from the seed.

The data position of a run is one integer: the number of prompts consumed so far. PromptStream
maps global position p to an example (epoch p // len, a per-epoch shuffle from the seed), so
resuming is continuing from the saved integer.
"""

from __future__ import annotations

import numpy as np

from trainers.data.examples import DataError

_MAX_SEED = 2**32 - 1  # grain's shuffle seed range is [0, 2**32 - 1]


class PromptStream:
    """An infinite stream over `examples`, epoch after epoch, reshuffled per epoch.

    Global position p (prompts consumed since the start of the run) holds the
    example at place p % len(self) of epoch p // len(self)'s permutation. The
    permutations come from grain, MapDataset.source(examples).shuffle(s).repeat(),
    which reshuffles each epoch (with grain seed s + epoch); s is derived from
    `seed` by hashing so that runs with adjacent seeds do not share epoch orders
    shifted by one. Everything depends only on (examples, seed): any position can
    be read again, so resuming a run needs only its position.

    grain's index_shuffle costs about 40 ms / len(examples) per call for small
    datasets (13 ms per element at 2 examples, 35 us at 1000, then ~30 us through
    grain's dataset layers), so a stream of at most MATERIALISE_MAX_EXAMPLES
    examples reads a whole epoch's order at once (~40-150 ms per epoch) and keeps
    the last two epochs; a larger one reads element by element. Both paths give
    the same examples.
    """

    MATERIALISE_MAX_EXAMPLES = 4096
    _CACHED_EPOCHS = 2

    def __init__(self, examples: list[dict], seed: int) -> None:
        if not examples:
            raise DataError("PromptStream needs at least one example")
        if not 0 <= seed <= _MAX_SEED:
            raise DataError(f"PromptStream seed must be in [0, 2**32 - 1], got {seed}")
        self._examples_per_epoch = len(examples)
        grain_seed = int(np.random.SeedSequence(seed).generate_state(1)[0])
        import grain  # loaded only when a run streams prompts (validation stays free of JAX)

        # the shuffle permutes dataset indices (a permutation depends only on the length and the seed),
        # so each position also names its example's index in `examples` (`indices`)
        self._examples = list(examples)
        self._dataset = grain.MapDataset.source(range(len(examples))).shuffle(seed=grain_seed).repeat(None)
        self._epoch_cache: dict[int, list[int]] = {}

    def __len__(self) -> int:
        """Examples per epoch."""
        return self._examples_per_epoch

    def epoch_of(self, position: int) -> int:
        """Epoch (0-based) of global position `position`."""
        if position < 0:
            raise ValueError(f"position must be >= 0, got {position}")
        return position // self._examples_per_epoch

    def _epoch_indices(self, epoch: int) -> list[int]:
        """Returns the dataset indices of `epoch`'s examples in stream order (shared, not copied)."""
        if epoch not in self._epoch_cache:
            start = epoch * self._examples_per_epoch
            order = [int(self._dataset[start + place]) for place in range(self._examples_per_epoch)]
            if len(self._epoch_cache) >= self._CACHED_EPOCHS:
                del self._epoch_cache[min(self._epoch_cache)]
            self._epoch_cache[epoch] = order
        return self._epoch_cache[epoch]

    def indices(self, position: int, count_prompts: int) -> list[int]:
        """The dataset indices (places in the `examples` given) of the examples at global positions
        [position, position + count_prompts); a range crossing an epoch boundary takes the end of one
        epoch then the start of the next (nothing dropped or repeated)."""
        if position < 0 or count_prompts < 0:
            raise ValueError(f"position and count_prompts must be >= 0, got {position}, {count_prompts}")
        positions = range(position, position + count_prompts)
        if self._examples_per_epoch > self.MATERIALISE_MAX_EXAMPLES:
            return [int(self._dataset[p]) for p in positions]
        taken = []
        for p in positions:
            epoch, place = divmod(p, self._examples_per_epoch)
            taken.append(self._epoch_indices(epoch)[place])
        return taken

    def examples(self, indices: list[int]) -> list[dict]:
        """The examples at these dataset indices, as shallow copies."""
        return [dict(self._examples[index]) for index in indices]

    def take(self, position: int, count_prompts: int) -> list[dict]:
        """Returns the examples at global positions [position, position + count_prompts)
        as shallow copies (`indices`, then `examples`)."""
        return self.examples(self.indices(position, count_prompts))
