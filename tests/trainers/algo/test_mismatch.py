"""Sampler/trainer mismatch: each correction's weights and the reported figures, against values
worked out by hand; the KL figure against the exact KL of two known distributions."""

import math

import numpy as np
import pytest

from trainers.algo.mismatch import MismatchConfig, correction_weights, mismatch_metrics
from trainers.algo.names import MISMATCH_CORRECTIONS

# Three sequences of up to three tokens; the ratios r = pi_trainer / pi_sampler per token, chosen by hand.
RATIOS = np.array([[3.0, 0.25, 1.0], [1.5, 1.6, 1.0], [0.1, 0.2, 0.3]])
MASK = np.array([[True, True, True], [True, True, False], [True, True, True]])
SAMPLER = np.array([[-1.0, -2.0, -0.5], [-1.0, -1.0, -3.0], [-0.2, -0.4, -0.6]], np.float32)
TRAINER = np.where(MASK, SAMPLER + np.log(RATIOS), 0.0).astype(np.float32)  # padding: any value
CFG = dict(max=2.0, min=0.5)

# Sequence ratios (product over valid tokens): 0.75, 2.4, 0.006; geometric means: 0.75^(1/3) = 0.909,
# 2.4^(1/2) = 1.549, 0.006^(1/3) = 0.182.
HAND_WEIGHTS = {
    "none": [[1, 1, 1], [1, 1, 0], [1, 1, 1]],
    "tis": [[2.0, 0.25, 1.0], [1.5, 1.6, 0], [0.1, 0.2, 0.3]],  # min(r, 2)
    "mis": [[0.75, 0.75, 0.75], [0, 0, 0], [0.006, 0.006, 0.006]],  # R, or 0 when R > 2
    "icepop": [[0, 0, 1.0], [1.5, 1.6, 0], [0, 0, 0]],  # r inside [0.5, 2], else 0
    "geo-mask": [[1, 1, 1], [1, 1, 0], [0, 0, 0]],  # G inside [0.5, 2]: 1, else 0
}
HAND_CHANGED = {  # capped (tis) or dropped (weight 0), valid tokens only
    "none": [[0, 0, 0], [0, 0, 0], [0, 0, 0]],
    "tis": [[1, 0, 0], [0, 0, 0], [0, 0, 0]],
    "mis": [[0, 0, 0], [1, 1, 0], [0, 0, 0]],
    "icepop": [[1, 1, 0], [0, 0, 0], [1, 1, 1]],
    "geo-mask": [[0, 0, 0], [0, 0, 0], [1, 1, 1]],
}


def test_every_registered_correction_has_hand_values():
    assert set(MISMATCH_CORRECTIONS.names()) == set(HAND_WEIGHTS)


@pytest.mark.parametrize("name", list(HAND_WEIGHTS))
def test_correction_weights_match_the_hand_values(name):
    weights, changed = correction_weights(TRAINER, SAMPLER, MASK, MismatchConfig(name, **CFG))
    np.testing.assert_allclose(np.asarray(weights), np.array(HAND_WEIGHTS[name], np.float32), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(changed), np.array(HAND_CHANGED[name], bool))


def test_mis_keeps_a_sequence_under_the_bound_and_geo_mask_without_a_lower_bound():
    weights, _ = correction_weights(TRAINER, SAMPLER, MASK, MismatchConfig("mis", max=3.0, min=0.5))
    np.testing.assert_allclose(np.asarray(weights)[1], [2.4, 2.4, 0.0], rtol=1e-5)  # 2.4 <= 3: kept, weighed by R
    weights, _ = correction_weights(TRAINER, SAMPLER, MASK, MismatchConfig("geo-mask", max=2.0, min=0.0))
    np.testing.assert_allclose(np.asarray(weights)[2], [1.0, 1.0, 1.0])  # G = 0.182 kept with no lower bound


def test_the_figures_match_the_hand_values():
    metric_weights = MASK / MASK.sum()  # token-mean over the 8 valid tokens
    logs = [math.log(r) for r in RATIOS[MASK]]
    _, changed = correction_weights(TRAINER, SAMPLER, MASK, MismatchConfig("icepop", **CFG))
    got = {k: float(v) for k, v in mismatch_metrics(TRAINER, SAMPLER, MASK, metric_weights, changed).items()}
    assert got["mismatch/logprob_diff_mean"] == pytest.approx(sum(abs(x) for x in logs) / 8, rel=1e-5)
    assert got["mismatch/logprob_diff_max"] == pytest.approx(math.log(10.0), rel=1e-5)
    # k3 per token: r - 1 - log r
    assert got["mismatch/kl"] == pytest.approx(sum(r - 1 - math.log(r) for r in RATIOS[MASK]) / 8, rel=1e-5)
    assert got["mismatch/corrected_fraction"] == pytest.approx(5 / 8)


def test_tokens_outside_the_metric_weights_do_not_count():
    """Only the on-policy rows carry metric weights (here row 0): rows 1 and 2 change nothing, not even the max."""
    metric_weights = np.zeros(MASK.shape, np.float32)
    metric_weights[0] = 1 / 3
    got = {k: float(v) for k, v in mismatch_metrics(TRAINER, SAMPLER, MASK, metric_weights).items()}
    assert got["mismatch/logprob_diff_max"] == pytest.approx(math.log(4.0), rel=1e-5)
    assert got["mismatch/logprob_diff_mean"] == pytest.approx((math.log(3) + math.log(4)) / 3, rel=1e-5)
    assert "mismatch/corrected_fraction" not in got


def test_the_kl_figure_estimates_the_exact_kl_of_two_distributions():
    """Tokens sampled from p (the sampler), scored under q (the trainer): the mean of k3 is
    KL(p || q) = sum p log(p / q), computed exactly here."""
    p = np.array([0.5, 0.3, 0.15, 0.05])
    q = np.array([0.4, 0.4, 0.1, 0.1])
    exact = float(np.sum(p * np.log(p / q)))
    tokens = np.random.default_rng(0).choice(4, size=(400, 500), p=p)
    sampler, trainer = np.log(p)[tokens].astype(np.float32), np.log(q)[tokens].astype(np.float32)
    mask = np.ones(tokens.shape, bool)
    got = float(mismatch_metrics(trainer, sampler, mask, mask / mask.size)["mismatch/kl"])
    assert got == pytest.approx(exact, rel=0.02)


@pytest.mark.parametrize("bad", [dict(max=0.9), dict(min=1.0), dict(min=-0.1)])
def test_bounds_that_cannot_hold_are_refused(bad):
    with pytest.raises(ValueError, match="min"):
        MismatchConfig("tis", **{**CFG, **bad})


def test_an_unknown_correction_names_the_known_ones():
    with pytest.raises(ValueError, match="tis"):
        MismatchConfig("icepopp")
