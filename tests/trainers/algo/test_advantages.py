"""Advantage estimators and loss aggregations against values worked out by hand."""

import math

import numpy as np
import pytest

from trainers.algo.advantages import compute_advantages
from trainers.algo.loss import token_weights


def test_grpo_advantages_group_of_three():
    # rewards 3, 0, 0: mean 1; deviations 2, -1, -1; sample std sqrt((4 + 1 + 1) / 2) = sqrt(3)
    adv = compute_advantages(np.array([[3.0, 0.0, 0.0]]), "grpo", eps=0.0)
    np.testing.assert_allclose(adv, [[2 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]], rtol=1e-6)
    assert adv.dtype == np.float32


def test_grpo_advantages_eps_in_the_denominator():
    # rewards 1, 0: mean 0.5, sample std sqrt(0.5) = 0.70711; eps 0.5 -> 0.5 / 1.20711 = 0.41421
    adv = compute_advantages(np.array([[1.0, 0.0]]), "grpo", eps=0.5)
    np.testing.assert_allclose(adv, [[0.5 / (math.sqrt(0.5) + 0.5), -0.5 / (math.sqrt(0.5) + 0.5)]], rtol=1e-6)


def test_drgrpo_advantages_group_of_three():
    # rewards 3, 0, 0: r - mean = 2, -1, -1 (no std; eps ignored)
    adv = compute_advantages(np.array([[3.0, 0.0, 0.0], [1.0, 1.0, 0.0]]), "drgrpo", eps=0.5)
    np.testing.assert_allclose(adv, [[2.0, -1.0, -1.0], [1 / 3, 1 / 3, -2 / 3]], rtol=1e-6)


def test_rloo_advantages_two_groups():
    # group 1, rewards 1, 1, 0: 1 - (1 + 0)/2 = 0.5; 1 - 0.5 = 0.5; 0 - (1 + 1)/2 = -1
    # group 2, rewards 4, 2: 4 - 2 = 2; 2 - 4 = -2
    np.testing.assert_allclose(compute_advantages(np.array([[1.0, 1.0, 0.0]]), "rloo"), [[0.5, 0.5, -1.0]], rtol=1e-6)
    np.testing.assert_allclose(compute_advantages(np.array([[4.0, 2.0]]), "rloo"), [[2.0, -2.0]], rtol=1e-6)


MASK = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], bool)  # lengths 2, 4, 1; 7 tokens, 3 sequences


@pytest.mark.parametrize(
    "aggregation, expected",
    [
        ("token-mean", [[1 / 7, 1 / 7, 0, 0], [1 / 7] * 4, [1 / 7, 0, 0, 0]]),
        ("seq-mean-token-mean", [[1 / 6, 1 / 6, 0, 0], [1 / 12] * 4, [1 / 3, 0, 0, 0]]),
        ("seq-mean-token-sum", [[1 / 3, 1 / 3, 0, 0], [1 / 3] * 4, [1 / 3, 0, 0, 0]]),
    ],
)
def test_aggregation_weights_by_hand(aggregation, expected):
    np.testing.assert_allclose(token_weights(MASK, aggregation), expected, rtol=1e-6)


# rows 1 and 3 have no loss token (out of the loss): they weigh 0 and are not counted as sequences
MASK_WITH_DEAD_ROWS = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)


@pytest.mark.parametrize(
    "aggregation, expected",
    [
        ("token-mean", [[1 / 3, 1 / 3, 0, 0], [0] * 4, [1 / 3, 0, 0, 0], [0] * 4]),
        ("seq-mean-token-mean", [[1 / 4, 1 / 4, 0, 0], [0] * 4, [1 / 2, 0, 0, 0], [0] * 4]),
        ("seq-mean-token-sum", [[1 / 2, 1 / 2, 0, 0], [0] * 4, [1 / 2, 0, 0, 0], [0] * 4]),
        ("seq-mean-token-sum-norm", [[1 / 16, 1 / 16, 0, 0], [0] * 4, [1 / 16, 0, 0, 0], [0] * 4]),
    ],
)
def test_rows_without_a_loss_token_are_not_counted(aggregation, expected):
    # 2 live sequences, not 4: seq-mean-token-mean weighs each live row's tokens 1 / (n_i * 2), a total of 1
    np.testing.assert_allclose(token_weights(MASK_WITH_DEAD_ROWS, aggregation, norm_tokens=8), expected, rtol=1e-6)
    assert not token_weights(np.zeros((2, 3), bool), aggregation, norm_tokens=8).any()  # nothing live: all 0


def test_seq_mean_token_sum_norm_divides_by_the_budget():
    # Dr. GRPO: every valid token weighs 1 / (3 sequences * 8 budget tokens) = 1/24, whatever its length
    w = token_weights(MASK, "seq-mean-token-sum-norm", norm_tokens=8)
    np.testing.assert_allclose(w, MASK / 24.0, rtol=1e-6)
    assert w.dtype == np.float32
    # The loss of per-token values 1 is (tokens) / (sequences * budget) = 7 / 24
    assert float(w.sum()) == pytest.approx(7 / 24, rel=1e-6)


def test_seq_mean_token_sum_norm_needs_norm_tokens():
    with pytest.raises(ValueError, match="norm_tokens"):
        token_weights(MASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="positive"):
        token_weights(MASK, "seq-mean-token-sum-norm", norm_tokens=0)


def test_seq_mean_token_sum_norm_split_over_micro_batches_sums_to_the_whole():
    rng = np.random.default_rng(1)
    mask = rng.random((6, 5)) < 0.6
    token_loss = rng.normal(size=(6, 5))
    w = token_weights(mask, "seq-mean-token-sum-norm", norm_tokens=5)
    whole = (token_loss * mask).sum() / (6 * 5)
    parts = sum((token_loss[i : i + 3] * w[i : i + 3]).sum() for i in (0, 3))
    assert parts == pytest.approx(whole, rel=1e-5)
