"""JAX GRPO trainer. Pure Python + JAX; never imports Django.

The config schema (`ExperimentConfig`, `parse_config`, `load_config`, `ConfigError`) imports no JAX;
`train` and the rest load lazily.
"""

from trainers.config import (
    ConfigError,
    ExperimentConfig,
    Problem,
    load_config,
    parse_config,
    parse_yaml,
)
from trainers.step.hooks import Action, Control, Hooks, RunInfo, TrainResult


def train(config, run_dir, hooks=None, control=None, init_checkpoint=None):
    """Train under `config` in `run_dir` (resuming from its newest checkpoint; else, given
    `init_checkpoint`, a checkpoint directory, from its weights with a new optimizer state).
    See trainers.loop.trainer."""
    # lazy: `import trainers` stays JAX-free (the CLI's validate, the web server)
    from trainers.loop.trainer import train as _train

    return _train(config, run_dir, hooks, control, init_checkpoint=init_checkpoint)


__all__ = [
    "Action",
    "ConfigError",
    "Control",
    "ExperimentConfig",
    "Hooks",
    "Problem",
    "RunInfo",
    "TrainResult",
    "load_config",
    "parse_config",
    "parse_yaml",
    "train",
]
