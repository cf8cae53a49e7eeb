"""sweeps.space (pure): the space's shape and field names, the grid by hand, params set on dotted
paths, extremes checked through a parse callable; and sweeps.driver: Optuna's ask is deterministic
for a seed and history, the median pruner stops a trial below the median of finished ones."""

from __future__ import annotations

import dataclasses

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from platform_testlib import tiny_config

from grpo_client import sweep_commands
from sweeps import driver
from sweeps import space as spaces
from trainers.config import ConfigError, parse_config

LR = "optimizer.learning_rate"


def test_a_good_space_passes_and_gives_optuna_distributions():
    space = {
        LR: {"type": "float", "low": 1e-5, "high": 1e-3, "log": True},
        "batch.prompts_per_step": {"type": "int", "low": 2, "high": 8, "step": 2},
        "optimizer.name": {"type": "categorical", "choices": ["adamw", "sgd"]},
    }
    assert spaces.check_shape(space) is space
    dists = spaces.distributions(space)
    assert list(dists) == ["batch.prompts_per_step", "optimizer.learning_rate", "optimizer.name"]  # sorted
    assert dists[LR] == FloatDistribution(1e-5, 1e-3, log=True)
    assert dists["batch.prompts_per_step"] == IntDistribution(2, 8, step=2)
    assert dists["optimizer.name"] == CategoricalDistribution(["adamw", "sgd"])


@pytest.mark.parametrize(
    "space, key, words",
    [
        ({"optimizer.lr": {"type": "float", "low": 0.1, "high": 0.2}}, "space.optimizer.lr", "no config field"),
        ({"nope": {"type": "int", "low": 1, "high": 2}}, "space.nope", "no config field"),
        ({LR: {"type": "float", "low": 0.2, "high": 0.1}}, f"space.{LR}", "swap them"),
        ({LR: {"type": "float", "low": 0, "high": 0.1, "log": True}}, f"space.{LR}", "low above 0"),
        ({LR: {"type": "uniform", "low": 0, "high": 0.1}}, f"space.{LR}", '"type"'),
        ({LR: {"type": "float", "low": 0, "high": 0.1, "q": 2}}, f"space.{LR}", "unknown key(s) q"),
        ({"train.max_steps": {"type": "float", "low": 1, "high": 2}}, "space.train.max_steps", '"type": "int"'),
        ({"train.max_steps": {"type": "int", "low": 1.5, "high": 2}}, "space.train.max_steps", "whole numbers"),
        ({"optimizer.name": {"type": "categorical", "choices": []}}, "space.optimizer.name", "non-empty"),
        ({"optimizer.name": {"type": "categorical", "choices": ["sgd", "sgd"]}}, "space.optimizer.name", "repeat"),
        ({}, "space", "non-empty"),
        ([1], "space", "non-empty"),
    ],
)
def test_a_bad_space_names_the_field(space, key, words):
    with pytest.raises(spaces.SpaceError) as info:
        spaces.check_shape(space)
    assert key in info.value.errors and words in info.value.errors[key], info.value.errors


def test_a_misspelt_field_is_offered_the_real_one():
    with pytest.raises(spaces.SpaceError) as info:
        spaces.check_shape({"learning_rate": {"type": "float", "low": 0.1, "high": 0.2}})
    assert "optimizer.learning_rate" in info.value.errors["space.learning_rate"]


def test_grid_points_by_hand():
    space = {
        "b.x": {"type": "categorical", "choices": ["p", "q"]},
        "a.y": {"type": "int", "low": 1, "high": 5, "step": 2},
    }
    # fields sorted (a.y, b.x); the last varies fastest: (1,p) (1,q) (3,p) (3,q) (5,p) (5,q)
    assert spaces.grid_size(space) == 6
    assert [spaces.grid_point(space, n) for n in range(6)] == [
        {"a.y": 1, "b.x": "p"},
        {"a.y": 1, "b.x": "q"},
        {"a.y": 3, "b.x": "p"},
        {"a.y": 3, "b.x": "q"},
        {"a.y": 5, "b.x": "p"},
        {"a.y": 5, "b.x": "q"},
    ]
    with pytest.raises(IndexError):
        spaces.grid_point(space, 6)
    spaces.check_grid(space, 6)
    with pytest.raises(spaces.SpaceError) as info:
        spaces.check_grid(space, 7)
    assert info.value.errors == {"max_trials": "the grid has 6 points; set max_trials to 6 or fewer"}
    with pytest.raises(spaces.SpaceError) as info:
        spaces.check_grid({LR: {"type": "float", "low": 0.1, "high": 0.2}}, 1)
    assert "listed values" in info.value.errors[f"space.{LR}"]
    with pytest.raises(spaces.SpaceError) as info:  # counted, never listed
        spaces.check_grid({"train.max_steps": {"type": "int", "low": 1, "high": 10**15}}, 1)
    assert info.value.errors == {
        "space.train.max_steps": "the range has 1000000000000000 values; a grid takes at most 10000"
    }


def test_params_are_set_on_dotted_paths_of_a_copy():
    config = {"optimizer": {"learning_rate": 0.1, "name": "adamw"}, "seed": 0}
    out = spaces.with_params(config, {LR: 0.5, "seed": 3, "eval.every_steps": 4})
    assert out == {"optimizer": {"learning_rate": 0.5, "name": "adamw"}, "seed": 3, "eval": {"every_steps": 4}}
    assert config["optimizer"]["learning_rate"] == 0.1  # untouched


def test_an_extreme_the_schema_refuses_is_named_before_any_trial():
    config = tiny_config()
    ok = {LR: {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}
    spaces.check_extremes(ok, config, parse_config)  # no error
    with pytest.raises(spaces.SpaceError) as info:
        spaces.check_extremes(
            {**ok, "grpo.num_generations": {"type": "int", "low": 0, "high": 4}}, config, parse_config
        )
    message = info.value.errors["space.grpo.num_generations"]
    assert "the value 0" in message and "grpo.num_generations" in message and LR not in str(info.value.errors)
    calls = []

    def refuse_sgd(raw):
        calls.append(raw["optimizer"]["name"])
        if raw["optimizer"]["name"] == "sgd":
            raise ConfigError([driver_problem("optimizer.name", "no sgd here")])

    with pytest.raises(spaces.SpaceError) as info:
        spaces.check_extremes(
            {"optimizer.name": {"type": "categorical", "choices": ["adamw", "sgd", "adam"]}}, config, refuse_sgd
        )
    assert calls == ["adamw", "sgd"]  # stops at the first refused value
    assert info.value.errors == {
        "space.optimizer.name": "the value 'sgd' makes the config invalid "
        "(optimizer.name: no sgd here); narrow the range"
    }


def driver_problem(field, message):
    from trainers.errors import Problem

    return Problem(field, message)


# --- the driver --------------------------------------------------------------------------------

DISTS = {"x": FloatDistribution(0.0, 1.0)}


def spec(**fields) -> driver.StudySpec:
    return driver.StudySpec(
        **{
            "name": "sweep-1",
            "direction": "maximize",
            "sampler": "tpe",
            "pruner": "median",
            "seed": 7,
            "max_trials": 6,
            "startup_trials": 2,
            "warmup_steps": 0,
            **fields,
        }
    )


def test_asking_is_deterministic_for_a_seed_and_a_history():
    history = [
        driver.TrialRecord(0, {"x": 0.2}, driver.COMPLETE, 1.0),
        driver.TrialRecord(1, {"x": 0.8}, driver.RUNNING),
    ]
    first = driver.ask_params(spec(), DISTS, history)
    assert driver.ask_params(spec(), DISTS, history) == first
    assert 0.0 <= first["x"] <= 1.0
    assert driver.ask_params(spec(seed=8), DISTS, history) != first
    # the next trial number seeds the draw: a longer history does not repeat the same point
    longer = history + [driver.TrialRecord(2, first, driver.COMPLETE, 0.5)]
    assert driver.ask_params(spec(), DISTS, longer) != first
    assert driver.ask_params(spec(sampler="random"), DISTS, history) == driver.ask_params(
        spec(sampler="random"), DISTS, history
    )


def test_tpe_after_its_startup_trials_samples_near_the_best():
    """Ten trials where only x near 0.9 scored: TPE (past its startup trials) asks towards there,
    for every seed (a uniform draw would land above 0.6 with probability 0.4)."""
    history = [
        driver.TrialRecord(n, {"x": x}, driver.COMPLETE, 1.0 if abs(x - 0.9) < 0.05 else 0.0)
        for n, x in enumerate([0.1, 0.2, 0.3, 0.9, 0.91, 0.89, 0.4, 0.5, 0.6, 0.05])
    ]
    asked = [driver.ask_params(spec(seed=s), DISTS, history)["x"] for s in range(5)]
    assert all(x > 0.6 for x in asked), asked


def _median_history():
    # trials 0 and 1 finished with values 1.0 and 3.0 at steps 1..3: the median at each step is 2.0
    return [
        driver.TrialRecord(0, {"x": 0.1}, driver.COMPLETE, 1.0, {1: 1.0, 2: 1.0, 3: 1.0}),
        driver.TrialRecord(1, {"x": 0.2}, driver.COMPLETE, 3.0, {1: 3.0, 2: 3.0, 3: 3.0}),
    ]


def test_the_median_pruner_stops_a_trial_below_the_median_of_finished_ones():
    weak = driver.TrialRecord(2, {"x": 0.3}, driver.RUNNING, None, {1: 1.5, 2: 1.5})
    strong = driver.TrialRecord(2, {"x": 0.3}, driver.RUNNING, None, {1: 2.5, 2: 2.5})
    assert driver.should_prune(spec(), DISTS, _median_history() + [weak], weak)[0] is True
    assert driver.should_prune(spec(), DISTS, _median_history() + [strong], strong)[0] is False
    # minimise: the same values judged the other way
    assert driver.should_prune(spec(direction="minimize"), DISTS, _median_history() + [weak], weak)[0] is False
    assert driver.should_prune(spec(direction="minimize"), DISTS, _median_history() + [strong], strong)[0] is True
    # before its startup trials have finished, nothing is pruned
    assert driver.should_prune(spec(startup_trials=3), DISTS, _median_history() + [weak], weak)[0] is False
    # during warmup (step 2 < 3 warmup steps) neither
    assert driver.should_prune(spec(warmup_steps=3), DISTS, _median_history() + [weak], weak)[0] is False
    assert driver.should_prune(spec(pruner="none"), DISTS, _median_history() + [weak], weak)[0] is False


def test_successive_halving_keeps_its_rungs_between_rebuilds():
    """The first rung (1 step) is passed by a trial among the best third; the rung it completed is
    returned as an attribute, which the next rebuild gets back."""
    sh = spec(pruner="successive_halving", warmup_steps=1)
    done = [
        driver.TrialRecord(n, {"x": 0.1 * n}, driver.COMPLETE, float(n), {1: float(n)}, {"completed_rung_0": float(n)})
        for n in range(4)
    ]
    strong = driver.TrialRecord(4, {"x": 0.5}, driver.RUNNING, None, {1: 10.0})
    pruned, attrs = driver.should_prune(sh, DISTS, done + [strong], strong)
    assert pruned is False and attrs["completed_rung_0"] == 10.0
    weak = driver.TrialRecord(4, {"x": 0.5}, driver.RUNNING, None, {1: -1.0})
    pruned, attrs = driver.should_prune(sh, DISTS, done + [weak], weak)
    assert pruned is True and attrs["completed_rung_0"] == -1.0


def test_hyperband_prunes_a_weak_running_trial_in_its_bracket():
    """30 completed trials, each with the rungs a halving pruner recorded while it ran (values n), so
    every bracket has competitors: a running trial far below them is pruned, one far above is not."""
    hb = spec(pruner="hyperband", warmup_steps=1, max_steps=9)
    rungs = {f"completed_rung_{r}": None for r in range(3)}
    done = [
        driver.TrialRecord(
            n,
            {"x": 0.01 * n},
            driver.COMPLETE,
            float(n),
            {s: float(n) for s in range(1, 10)},
            {k: float(n) for k in rungs},
        )
        for n in range(30)
    ]
    weak = driver.TrialRecord(30, {"x": 0.5}, driver.RUNNING, None, {s: -5.0 for s in range(1, 10)})
    strong = driver.TrialRecord(30, {"x": 0.5}, driver.RUNNING, None, {s: 50.0 for s in range(1, 10)})
    assert driver.should_prune(hb, DISTS, done + [strong], strong)[0] is False
    assert driver.should_prune(hb, DISTS, done + [weak], weak)[0] is True


@pytest.mark.parametrize("pruner", ["successive_halving", "hyperband"])
def test_halving_judges_each_rung_at_its_own_step_however_late_a_tick_saw_the_trial(pruner):
    """Three trials with one curve (value 0.1 x step), first seen by a tick at steps 17, 12 and 5
    (warmup 5: rungs at steps 5, 15, 45). Each rung takes the value AT its step (rung 0: 0.5, rung
    1: 1.5), so all three get the same decision: promoted. Judged at the step first seen, they were
    promoted (1.7), pruned (1.2 < 1.7), pruned (0.5)."""
    hb = spec(pruner=pruner, warmup_steps=5, max_steps=45)
    curve = {s: 0.1 * s for s in range(1, 18)}
    records: list[driver.TrialRecord] = []
    decisions = []
    for number, seen_at in enumerate((17, 12, 5)):
        running = driver.TrialRecord(
            number, {"x": 0.5}, driver.RUNNING, None, {s: v for s, v in curve.items() if s <= seen_at}
        )
        pruned, attrs = driver.should_prune(hb, DISTS, records + [running], running)
        decisions.append(pruned)
        records.append(dataclasses.replace(running, attrs=attrs))
    assert decisions == [False, False, False]
    if pruner == "hyperband":
        return  # its brackets start at different rungs; the decisions above are what matters
    assert [r.attrs["completed_rung_0"] for r in records] == pytest.approx([0.5] * 3)  # 0.1 x 5, not 0.1 x seen_at
    assert records[0].attrs["completed_rung_1"] == pytest.approx(1.5)  # 0.1 x 15, not 1.7
    assert "completed_rung_1" not in records[1].attrs  # step 12 < 15: not judged yet
    assert driver.rung_steps(hb, 17) == [5, 15] and driver.rung_steps(hb, 4) == []
    assert driver.value_at({4: 0.4, 8: 0.8}, 5) == 0.4 and driver.value_at({8: 0.8}, 5) == 0.8


def test_samplers_and_pruners_are_registered_functions():
    """The registries hold the sweep model's choices and the client's (a separate program, which
    keeps its own copy of the names for --sampler / --pruner)."""
    assert driver.SAMPLERS.names() == ("grid", "random", "tpe") == sweep_commands.SAMPLERS
    assert driver.PRUNERS.names() == ("none", "median", "successive_halving", "hyperband") == sweep_commands.PRUNERS
    assert driver.make_sampler(spec(sampler="grid"), 0) is None
    assert type(driver.make_sampler(spec(sampler="random"), 0)).__name__ == "RandomSampler"
    assert type(driver.make_pruner(spec(pruner="hyperband"))).__name__ == "HyperbandPruner"
    assert [name for name in driver.PRUNERS if driver.PRUNERS.get(name).meta.get("rungs")] == [
        "successive_halving",
        "hyperband",
    ]
    with pytest.raises(ValueError, match="unknown sweep sampler 'tep'; did you mean 'tpe'"):
        driver.make_sampler(spec(sampler="tep"), 0)
