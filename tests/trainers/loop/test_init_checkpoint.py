"""`init_checkpoint`: a trainer that starts from another run's checkpoint weights (a "fresh" fork)
holds exactly that checkpoint's params (also as its reference policy), a new optimizer state and
step 0; a run directory with checkpoints of its own still resumes from them instead."""

import os

import jax
import numpy as np
import pytest

from trainers.config import parse_config
from trainers.loop.checkpoint import Checkpointer, restore_params_at
from trainers.loop.trainer import GRPOTrainer, params_digest, train

RAW = {
    "seed": 3,
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 8, "eval_prompts": 0},
    "rollout": {"max_new_tokens": 4},
    "batch": {"prompts_per_step": 2},
    "grpo": {"num_generations": 2, "beta": 0.04},  # beta > 0: a reference policy is kept
    "train": {"max_steps": 1},
    "checkpoint": {"every_steps": 1, "keep_last": 2},
}


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A one-step run: its checkpoint 1's directory, params, optimizer state and meta."""
    run_dir = str(tmp_path_factory.mktemp("parent"))
    config = parse_config(RAW)
    assert train(config, run_dir).final_step == 1
    like = GRPOTrainer(config, str(tmp_path_factory.mktemp("like"))).state
    checkpointer = Checkpointer(os.path.join(run_dir, "checkpoints"))
    params, opt_state, meta = checkpointer.restore(1, like.params, like.opt_state)
    checkpointer.close()
    return os.path.join(run_dir, "checkpoints", "1"), params, opt_state, meta


def test_a_trainer_starts_from_the_checkpoints_weights_with_a_new_optimizer(parent, tmp_path):
    step_dir, params, opt_state, meta = parent
    trainer = GRPOTrainer(parse_config(RAW), str(tmp_path / "child"), init_checkpoint=step_dir)
    assert params_digest(trainer.state.params) == meta["params_digest"] == params_digest(params)
    assert params_digest(trainer.ref_params) == meta["params_digest"]
    random_init = GRPOTrainer(parse_config(RAW), str(tmp_path / "other")).state.params
    assert params_digest(random_init) != meta["params_digest"]
    assert (trainer.state.step, trainer.state.data_position) == (0, 0)
    # a new optimizer state: Adam's moments and counts all zero, unlike the checkpoint's
    assert all(not np.any(np.asarray(leaf)) for leaf in jax.tree.leaves(trainer.state.opt_state))
    assert any(np.any(np.asarray(leaf)) for leaf in jax.tree.leaves(opt_state))


def test_own_checkpoints_win_over_init_checkpoint(parent, tmp_path):
    step_dir, _, _, meta = parent
    config = parse_config({**RAW, "seed": 5, "train": {"max_steps": 1}})
    run_dir = str(tmp_path / "resumed")
    own = train(config, run_dir)  # seed 5's own step-1 checkpoint
    result = train(config, run_dir, init_checkpoint=step_dir)  # nothing left to do: resumes at step 1
    assert result.final_step == 1 and result.params_digest == own.params_digest != meta["params_digest"]


def test_a_folder_that_is_no_checkpoint_is_refused(tmp_path, parent):
    _, params, _, _ = parent
    with pytest.raises(FileNotFoundError, match="is not a checkpoint directory"):
        restore_params_at(tmp_path, params)
