"""The sampler/trainer mismatch under top-k / top-p: the rollout records each sampled token's log-prob
under the full temperature-scaled distribution beside the truncated one it drew from, and the
mismatch figures and corrections compare that with the trainer's. With the very weights in float32
the two sides differ only by rounding: the figures are ~0 and every correction's weight is 1, where
the truncated log-probs would have shown a gap of the filter's making and masked whole sequences."""

from __future__ import annotations

import numpy as np
import pytest

from trainers.algo.mismatch import MismatchConfig, correction_weights
from trainers.algo.names import MISMATCH_CORRECTIONS
from trainers.config import parse_config
from trainers.loop.trainer import GRPOTrainer

CONFIG = {
    "model": {"preset": "tiny"},  # float32 weights for the sampler and the trainer alike
    "rollout": {"max_new_tokens": 32, "temperature": 0.8, "top_p": 0.9, "stop_at_eos": False},
    "batch": {"prompts_per_step": 2, "train_micro_batch_sequences": 4},
    # beta > 0: no group is skipped as flat, so the update reports the figures whatever the rewards
    "grpo": {"num_generations": 4, "beta": 0.04, "mismatch": {"correction": "mis", "mis_min": 0.5}},
    "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 0.1},
    "train": {"max_steps": 1},
    "checkpoint": {"every_steps": 0},
}


def test_identical_weights_under_top_p_show_no_mismatch(tmp_path):
    trainer = GRPOTrainer(parse_config(CONFIG), str(tmp_path / "run"))
    assert trainer.mismatch == MismatchConfig("mis", 2.0, 0.5, 0.5)
    trainer.source.start(trainer.state.params, 0)
    r = trainer.source.next(0)
    mask = r.trained_mask
    assert mask.sum() == 8 * 32  # every sequence runs to the budget: 32-token products for mis
    scored = trainer.logprobs(trainer.policy_params(), r)  # the trainer's pass, at temperature 0.8

    assert np.abs(scored - r.full_logprobs)[mask].max() < 1e-5
    truncated_gap = np.abs(scored - r.sample_logprobs)[mask]
    assert truncated_gap.mean() > 1e-2  # what the figure measured before: the filter, not the precision
    for name in MISMATCH_CORRECTIONS.names():
        cfg = MismatchConfig(name, max=2.0, min=0.5, mis_min=0.5)
        weights, changed = (np.asarray(a) for a in correction_weights(scored, r.full_logprobs, mask, cfg))
        np.testing.assert_allclose(weights[mask], 1.0, atol=1e-3, err_msg=name)
        assert not changed.any() and (weights[~mask] == 0).all(), name
    # against the truncated log-probs every sequence's ratio R = prod r_t is far below 1 (about 0.04
    # here): mis weighs it R without a lower bound, and masks it with mis_min 0.5
    weights, _ = correction_weights(scored, r.sample_logprobs, mask, MismatchConfig("mis", 2.0, 0.5))
    assert (np.asarray(weights)[mask] < 0.2).all()
    weights, _ = correction_weights(scored, r.sample_logprobs, mask, MismatchConfig("mis", 2.0, 0.5, 0.5))
    assert (np.asarray(weights)[mask] == 0).all()

    metrics = trainer.train_on(r)
    assert metrics["mismatch/logprob_diff_mean"] < 1e-5
    assert metrics["mismatch/logprob_diff_max"] < 1e-5
    assert abs(metrics["mismatch/kl"]) < 1e-8
    assert metrics["mismatch/corrected_fraction"] == 0.0  # mis weighed every sequence by R ~ 1, none dropped


def test_mis_lower_bound_is_validated_and_masks_below_it():
    """mis_min: a sequence whose ratio R = prod_t r_t is below it weighs 0, as one above max does.
    Hand values: log r = (-0.5, -0.5) gives R = e^-1 = 0.368 (below 0.5: dropped); (-0.2, -0.1) gives
    R = e^-0.3 = 0.741 (kept, weighed R); with mis_min 0 both are kept."""
    trainer_lp = np.zeros((2, 2), np.float32)
    sampler = np.array([[0.5, 0.5], [0.2, 0.1]], np.float32)
    mask = np.ones((2, 2), bool)
    weights, changed = correction_weights(trainer_lp, sampler, mask, MismatchConfig("mis", 2.0, 0.5, mis_min=0.5))
    np.testing.assert_allclose(np.asarray(weights), [[0.0, 0.0], [np.exp(-0.3)] * 2], rtol=1e-6)
    assert np.asarray(changed).tolist() == [[True, True], [False, False]]
    weights, _ = correction_weights(trainer_lp, sampler, mask, MismatchConfig("mis", 2.0, 0.5))
    np.testing.assert_allclose(np.asarray(weights), [[np.exp(-1.0)] * 2, [np.exp(-0.3)] * 2], rtol=1e-6)
    with pytest.raises(ValueError, match="mis_min"):
        MismatchConfig("mis", 2.0, 0.5, mis_min=1.0)
    with pytest.raises(Exception, match="mis_min"):
        parse_config({**CONFIG, "grpo": {**CONFIG["grpo"], "mismatch": {"correction": "mis", "mis_min": 1.5}}})
