"""Environments: the registry (built-ins, dotted paths, settings), single_turn, the guess_number game
turn by turn, the guess_number task, and the config's env checks (each names its field and the fix)."""

import subprocess
import sys

import pytest
from pydantic import BaseModel, ConfigDict

from trainers.config import ConfigError, parse_config
from trainers.data import rewards, tasks
from trainers.envs.base import Environment, EpisodeState, NoSettings, StepResult
from trainers.envs.calculator import Calculator, CalculatorSettings
from trainers.envs.guess_number import NO_NUMBER, GuessNumber, GuessNumberSettings, last_integer, solved_reward
from trainers.envs.registry import (
    ENVIRONMENTS,
    EnvError,
    make_environment,
    resolve,
    settings_problems,
)
from trainers.envs.single_turn import SingleTurn
from trainers.errors import FieldError


class EchoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    times: int = 1


class Echo(Environment):
    """A project's own environment, named by dotted path in the tests below."""

    name = "echo"
    Settings = EchoSettings

    def step(self, state, assistant_message):
        return StepResult(messages=[{"role": "user", "content": assistant_message * self.settings.times}])


class NotAnEnvironment:
    pass


class LooseSettings(BaseModel):  # extra keys allowed by the class itself: the registry still refuses them
    level: int = 0


class Loose(Environment):
    Settings = LooseSettings


class BadSettings(Environment):
    Settings = dict


def env_error(name, settings=None):
    with pytest.raises(EnvError) as info:
        make_environment(name, settings)
    return info.value


# ---------------------------------------------------------------- the registry


def test_built_ins_by_name():
    built_in = {name: ENVIRONMENTS[name] for name in ENVIRONMENTS}
    assert built_in == {"single_turn": SingleTurn, "calculator": Calculator, "guess_number": GuessNumber}
    for name, cls in built_in.items():
        assert cls.name == name and resolve(name) is cls
    assert [cls.multi_turn for cls in built_in.values()] == [False, True, True]
    assert SingleTurn.Settings is NoSettings and SingleTurn.stop_strings == ()


def test_unknown_name_lists_the_built_ins_and_the_dotted_path():
    error = env_error("calculater")
    assert isinstance(error, ValueError) and isinstance(error, FieldError)
    assert error.field == "env.name"
    assert error.message == (
        "unknown environment 'calculater'; did you mean 'calculator'? built in: single_turn, "
        "calculator, guess_number; or your own Environment class as a dotted path "
        "package.module:Class"
    )
    assert str(error) == f"env.name: {error.message}"


def test_dotted_path_in_both_spellings():
    assert resolve(f"{__name__}:Echo") is Echo
    assert resolve(f"{__name__}.Echo") is Echo
    env = make_environment(f"{__name__}:Echo", {"times": 2})
    assert isinstance(env, Echo) and env.settings.times == 2
    assert env.step(EpisodeState(example={}), "ab").messages == [{"role": "user", "content": "abab"}]


def test_dotted_path_errors_say_why_and_the_fix():
    error = env_error("no_such_package.envs:Game")
    assert error.field == "env.name"
    assert error.message == (
        "cannot import module 'no_such_package.envs' of 'no_such_package.envs:Game': "
        "ModuleNotFoundError: No module named 'no_such_package'; check the module is on the "
        "Python path (PYTHONPATH) and imports cleanly"
    )
    assert env_error(f"{__name__}:Missing").message == (
        f"module '{__name__}' has no attribute 'Missing'; name a class defined in it"
    )
    assert env_error(f"{__name__}:NotAnEnvironment").message == (
        f"'{__name__}:NotAnEnvironment' is not an Environment subclass; subclass trainers.envs.base.Environment "
        "(a name, Settings, reset and step)"
    )
    assert env_error(f"{__name__}:env_error").message.endswith(
        "is not an Environment subclass; subclass trainers.envs.base.Environment (a name, Settings, reset and step)"
    )
    assert "is not a pydantic model" in env_error(f"{__name__}:BadSettings").message
    assert env_error(":Echo").message == "':Echo' is not a dotted path; write package.module:Class"


def test_a_module_that_fails_on_import_is_an_env_name_problem(tmp_path, monkeypatch):
    (tmp_path / "broken_env_module.py").write_text("raise RuntimeError('no GPU here')\n")
    (tmp_path / "exiting_env_module.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert env_error("broken_env_module:Game").message == (
        "cannot import module 'broken_env_module' of 'broken_env_module:Game': RuntimeError: no GPU here; check the "
        "module is on the Python path (PYTHONPATH) and imports cleanly"
    )
    assert env_error("exiting_env_module.Game").message.startswith(
        "cannot import module 'exiting_env_module' of 'exiting_env_module.Game': SystemExit: 3;"
    )


def test_settings_are_validated_with_the_field_named():
    env = make_environment("calculator", {"max_result_digits": 12})
    assert env.settings == CalculatorSettings(max_expression_chars=200, max_result_digits=12, max_calls_per_turn=4)
    assert make_environment("calculator").settings == CalculatorSettings()
    error = env_error("calculator", {"max_result_digits": 0})
    assert (error.field, error.message) == (
        "env.settings.max_result_digits",
        "Input should be greater than or equal to 1",
    )
    error = env_error("calculator", {"max_digits": 12})
    assert (error.field, error.message) == (
        "env.settings.max_digits",
        "unknown setting; did you mean 'max_result_digits'? known: max_expression_chars, max_result_digits, "
        "max_calls_per_turn, demonstration, enabled, call_bonus",
    )
    # a misspelt setting: the field and the fix
    error = env_error("calculator", {"enabeld": False})
    assert (error.field, error.message) == (
        "env.settings.enabeld",
        "unknown setting; did you mean 'enabled'? known: max_expression_chars, max_result_digits, "
        "max_calls_per_turn, demonstration, enabled, call_bonus",
    )
    # nothing close: no guess, the known settings
    assert env_error("calculator", {"xyz": 1}).message.startswith("unknown setting; known: max_expression_chars")
    assert env_error("single_turn", {"x": 1}).message == "unknown setting; single_turn has no settings"
    error = env_error("guess_number", {"low": 10, "high": 5})
    assert (error.field, error.message) == ("env.settings.high", "high=5 must be above low=10")
    assert settings_problems(GuessNumber, {"low": "one", "max_guesses": 0}) == [
        ("env.settings.low", "Input should be a valid integer, unable to parse string as an integer"),
        ("env.settings.max_guesses", "Input should be greater than or equal to 1"),
    ]
    # A class whose own Settings allow extra keys: the registry refuses them anyway.
    assert settings_problems(Loose, {"lvl": 1}) == [
        ("env.settings.lvl", "unknown setting; did you mean 'level'? known: level")
    ]


def test_the_package_is_jax_free():
    code = (
        "import sys, trainers.envs.registry; "
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith(('jax', 'flax', 'django'))} | "
        "{m for m in sys.modules if m.startswith('trainers.rollout')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_single_turn_never_steps():
    env = make_environment("single_turn", {})
    assert env.reset({"prompt": "2+2=", "answer": "4"}) == "2+2="
    with pytest.raises(RuntimeError, match="step is never called"):
        env.step(EpisodeState(example={"prompt": "2+2=", "answer": "4"}, turn=1), "4")


# ---------------------------------------------------------------- guess_number


def play(env, example, messages):
    """Steps through `messages` as turns 1, 2, ...; returns the StepResults."""
    state = EpisodeState(example=example)
    results = []
    for message in messages:
        state.turn += 1
        results.append(env.step(state, message))
    return results


def test_last_integer_and_the_reward_by_turns():
    assert last_integer("I guess 50. No, 42.") == 42
    assert last_integer("-3") == -3
    assert last_integer("no idea") is None
    assert [solved_reward(turn, 8) for turn in (1, 2, 8)] == [1.0, 0.875, 0.125]


def test_a_game_turn_by_turn():
    env = GuessNumber()
    example = {"prompt": "Ana is thinking of a whole number from 1 to 100. ...", "answer": "37"}
    results = play(env, example, ["50", "I think 25", "hmm", "37"])
    assert [r.messages for r in results] == [
        [{"role": "user", "content": reply}] for reply in ("lower", "higher", NO_NUMBER, "correct")
    ]
    assert [r.done for r in results] == [False, False, False, True]
    assert [r.reward_parts for r in results] == [{}, {}, {}, {"solved": 1 - 3 / 8}]
    assert [(r.tool_calls, r.tool_errors) for r in results] == [(0, 0)] * 4
    assert GuessNumber.reward_parts == ("solved",) and Calculator.reward_parts == ()  # every part step returns
    assert not any(ch.isdigit() for reply in ("lower", "higher", NO_NUMBER, "correct") for ch in reply)


def test_a_game_solved_at_once_and_one_lost():
    assert play(GuessNumber(), {"answer": "7"}, ["7"])[0].reward_parts == {"solved": 1.0}
    env = GuessNumber(GuessNumberSettings(max_guesses=2))
    results = play(env, {"answer": "7"}, ["3", "9"])
    assert [(r.messages[0]["content"], r.done, r.reward_parts) for r in results] == [
        ("higher", False, {}),
        ("lower", True, {"solved": 0.0}),
    ]


def test_the_secret_must_be_a_whole_number_in_the_range():
    env = GuessNumber()
    with pytest.raises(ValueError, match="the secret 101 is outside the range 1 to 100"):
        play(env, {"answer": "101"}, ["50"])
    with pytest.raises(ValueError, match="answer 'seven' is not a whole number"):
        play(env, {"answer": "seven"}, ["50"])
    # The example's own range wins over the settings'.
    assert play(env, {"answer": "150", "low": 141, "high": 160}, ["150"])[0].reward_parts == {"solved": 1.0}
    assert play(GuessNumber(GuessNumberSettings(low=200, high=300)), {"answer": "250"}, ["250"])[0].done


def test_the_guess_number_task_plays_in_the_game():
    examples = tasks.TASKS["guess_number"].make_examples(5, 200)
    assert {e["high"] - e["low"] + 1 for e in examples} == set(tasks.GUESS_NUMBER_WIDTHS)
    env = GuessNumber()
    for example in examples:
        assert example["low"] <= int(example["answer"]) <= example["high"]
        assert f"from {example['low']} to {example['high']}." in example["prompt"]
        assert play(env, example, [example["answer"]])[0].reward_parts == {"solved": 1.0}
        assert rewards.numeric_match(f"My guess: {example['answer']}", example) == 1.0
    first = examples[0]
    assert first["prompt"].endswith("will say higher or lower.")
    rewards.check_specs(tasks.TASKS["guess_number"].default_rewards)


# ---------------------------------------------------------------- config checks


def problems(raw):
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value.as_dict()


def test_config_env_defaults_and_valid_environments():
    assert parse_config({}).env.name == "single_turn"
    config = parse_config({"env": {"name": "calculator", "max_turns": 3, "settings": {"max_result_digits": 12}}})
    assert (config.env.name, config.env.settings) == ("calculator", {"max_result_digits": 12})
    parse_config({"env": {"name": f"{__name__}:Echo", "settings": {"times": 3}}})
    parse_config({"data": {"task": "guess_number"}, "env": {"name": "guess_number", "settings": {"high": 50}}})
    parse_config({"rollout": {"stop_at_eos": False}})  # single_turn does not need it


def test_config_env_name_problems():
    assert problems({"env": {"name": "calculater"}}) == {
        "env.name": (
            "unknown environment 'calculater'; did you mean 'calculator'? built in: single_turn, calculator, "
            "guess_number; or your own Environment class as a dotted path package.module:Class"
        )
    }
    assert set(problems({"env": {"name": "no_such_package.envs:Game"}})) == {"env.name"}
    # An unresolved name hides its settings' problems (there is no schema to check them against).
    assert set(problems({"env": {"name": "calculater", "settings": {"nope": 1}}})) == {"env.name"}


def test_config_env_settings_problems():
    assert problems({"env": {"name": "calculator", "settings": {"max_result_digits": 0, "digits": 3}}}) == {
        "env.settings.digits": "unknown setting; did you mean 'max_result_digits'? known: max_expression_chars, "
        "max_result_digits, max_calls_per_turn, demonstration, enabled, call_bonus"
    }
    assert problems({"env": {"name": "calculator", "settings": {"max_result_digits": 0}}}) == {
        "env.settings.max_result_digits": "Input should be greater than or equal to 1"
    }
    assert problems({"env": {"name": "guess_number", "settings": {"low": 5, "high": 5}}}) == {
        "env.settings.high": "high=5 must be above low=5"
    }


def test_calculator_demonstration_and_enabled_settings():
    env = make_environment("calculator", {"demonstration": True, "enabled": False})
    assert (env.settings.demonstration, env.settings.enabled, env.stop_strings) == (True, False, ())
    assert (CalculatorSettings().demonstration, CalculatorSettings().enabled) == (False, True)
    assert problems({"env": {"name": "calculator", "settings": {"demonstration": "sometimes"}}}) == {
        "env.settings.demonstration": "Input should be a valid boolean, unable to interpret input"
    }


def test_config_multi_turn_needs_stop_at_eos():
    assert problems({"env": {"name": "calculator"}, "rollout": {"stop_at_eos": False}}) == {
        "rollout.stop_at_eos": "env.name=calculator is multi-turn: an assistant turn ends at the end-of-turn "
        "token, which rollout.stop_at_eos false ignores; set rollout.stop_at_eos true (or "
        "env.name single_turn)"
    }


def test_config_guess_number_task_needs_its_environment():
    assert problems({"data": {"task": "guess_number"}}) == {
        "env.name": "the guess_number task is a game over several turns; set env.name=guess_number (not single_turn)"
    }
