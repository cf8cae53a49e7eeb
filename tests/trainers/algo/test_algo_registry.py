"""The registries of trainers/algo: declared with their names in names.py (JAX-free), registered in
advantages.py, loss.py and optim.py, the same names in the same order; an unknown name lists the known
ones; every entry's docstring states its paper."""

import subprocess
import sys

import pytest

from trainers.algo import names
from trainers.algo.advantages import ADVANTAGES, compute_advantages
from trainers.algo.loss import AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES, LossConfig, metric_keys, token_weights
from trainers.algo.optim import OPTIMIZERS, SCHEDULES


@pytest.mark.parametrize(
    "registry, expected",
    [
        (ADVANTAGES, ("grpo", "drgrpo", "rloo")),
        (POLICY_LOSSES, ("grpo", "gspo", "gspo-token", "cispo")),
        (AGGREGATIONS, ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")),
        (KL_ESTIMATORS, ("k1", "k2", "k3")),
        (OPTIMIZERS, ("adamw", "adam", "sgd")),
        (SCHEDULES, ("constant", "cosine", "linear")),
    ],
)
def test_declared_names_are_the_registered_functions_in_order(registry, expected):
    assert registry.names() == expected
    assert tuple(entry.name for entry in registry.entries()) == expected


def test_clip_defaults_cover_every_policy_loss():
    assert set(names.CLIP_DEFAULTS) == set(names.POLICY_LOSSES.names())
    assert names.CLIP_DEFAULTS["grpo"] == (0.2, 0.2)
    assert names.CLIP_DEFAULTS["gspo"] == names.CLIP_DEFAULTS["gspo-token"] == (3e-4, 4e-4)
    low, high = names.CLIP_DEFAULTS["cispo"]
    assert 1.0 - low <= 0.0  # no lower bound on the IS weight (MiniMax-M1)
    assert 1.0 + high == 5.0  # TRL's recommended epsilon_high=5.0 for loss_type="cispo"
    assert set(names.SEQUENCE_LEVEL_LOSSES) <= set(names.POLICY_LOSSES.names())


def test_names_module_imports_no_jax():
    """The declared registries and their names are pure Python; importing them loads the `trainers`
    package, whose config checks tasks (NumPy, as the web server already does) but never JAX."""
    code = (
        "import sys; from trainers.algo import names; "
        "[r.names() for r in (names.ADVANTAGES, names.POLICY_LOSSES, names.AGGREGATIONS, names.KL_ESTIMATORS, "
        "names.OPTIMIZERS, names.SCHEDULES)]; "
        "print([m for m in ('jax', 'flax', 'optax') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=__file__.rsplit("/tests/", 1)[0]
    )
    assert out.stdout.strip() == "[]"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(
        ValueError, match="unknown advantage estimator 'ppo'; did you mean 'grpo'\\? known: grpo, drgrpo, rloo"
    ):
        compute_advantages([[1.0, 0.0]], "ppo")
    with pytest.raises(
        ValueError, match="token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"
    ):
        token_weights([[True]], "sum")
    with pytest.raises(ValueError, match="grpo, gspo, gspo-token, cispo"):
        POLICY_LOSSES.get("ppo")
    with pytest.raises(ValueError, match="k1, k2, k3"):
        KL_ESTIMATORS.get("k4")


@pytest.mark.parametrize(
    "registry, name, citation",
    [
        (ADVANTAGES, "grpo", "2402.03300"),
        (ADVANTAGES, "drgrpo", "2503.20783"),
        (ADVANTAGES, "rloo", "2402.14740"),
        (AGGREGATIONS, "token-mean", "2503.14476"),
        (AGGREGATIONS, "seq-mean-token-mean", "2402.03300"),
        (AGGREGATIONS, "seq-mean-token-sum-norm", "2503.20783"),
        (POLICY_LOSSES, "grpo", "2402.03300"),
        (POLICY_LOSSES, "gspo", "2507.18071"),
        (POLICY_LOSSES, "gspo-token", "2507.18071"),
        (POLICY_LOSSES, "cispo", "2506.13585"),
        (KL_ESTIMATORS, "k1", "Schulman"),
        (KL_ESTIMATORS, "k2", "Schulman"),
        (KL_ESTIMATORS, "k3", "Schulman"),
    ],
)
def test_entries_cite_their_paper(registry, name, citation):
    assert citation in registry.get(name).doc


def test_metric_keys_per_config():
    assert metric_keys(LossConfig(), use_ref=False) == ("loss/policy", "clip_fraction")
    assert metric_keys(LossConfig(policy_loss="cispo", beta=0.1), use_ref=True) == (
        "loss/policy",
        "clip_fraction",
        "loss/kl",
        "kl",
    )
    assert metric_keys(LossConfig(policy_loss="gspo", entropy_coef=0.01), use_ref=False) == (
        "loss/policy",
        "clip_fraction",
        "loss/entropy_bonus",
    )


def test_loss_config_keeps_its_positional_order():
    cfg = LossConfig(0.1, 0.3, 3.0, 0.05, "k1")
    assert (cfg.epsilon_low, cfg.epsilon_high, cfg.dual_clip, cfg.beta, cfg.kl_estimator) == (0.1, 0.3, 3.0, 0.05, "k1")
    assert (cfg.policy_loss, cfg.entropy_coef) == ("grpo", 0.0)
