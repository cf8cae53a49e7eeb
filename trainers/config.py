"""The one experiment config schema.

Everything that describes an experiment lives here, once: the CLI, YAML files, and the web
platform's form and REST API all load and validate through `parse_config`. Field errors are
`Problem(field, message)` pairs whose `field` is the dotted path a user writes in YAML or `--set`
(`batch.mini_batch_prompts`, `rewards[0].name`) and whose message says what would fix it.

Units are in the names: a *prompt* is one dataset item; a *sequence* is one prompt with one of
its G completions; a *step* consumes `batch.prompts_per_step` prompts.

This module imports no JAX, so the platform can validate configs cheaply; the few checks that need
the model presets, task list or reward names import those lazily.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import json
import os
import types
import typing
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

# Upper bounds of the size fields: far above any real run, low enough that no request can make the
# server build a plan, an error message or a dataset of absurd size.
MAX_SEED = 2**32 - 1                 # jax.random.key and grain both take 32-bit seeds
MAX_PROMPTS = 65_536                 # prompts per step / per mini-batch
MAX_SEQUENCES = 1_048_576            # sequences per micro-batch
MAX_GENERATIONS = 1_024              # G
MAX_ITERATIONS = 64                  # mu
MAX_TOKENS = 131_072                 # prompt or completion length
MAX_DATASET_PROMPTS = 10_000_000     # prompts generated or read
MAX_STEPS = 10_000_000               # steps, and every period counted in steps
MAX_DEVICE_INDEX = 4_095


class _Section(BaseModel):
    """Base for every section: unknown keys are refused, values are checked on assignment, and
    numbers must be finite (NaN and infinity are refused: no JSON column can store them)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True, allow_inf_nan=False)


class ModelSection(_Section):
    preset: str = Field("tiny", description="Named model size: tiny, small, w1, base, qwen3-0.6b.")
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Parameter and activation dtype; log-probs are always float32."
    )


class DataSection(_Section):
    task: str | None = Field(
        "arithmetic", description="Built-in task (arithmetic, reverse, countdown, ...); null to use data.train_path."
    )
    train_path: str | None = Field(None, description="JSONL file, one {\"prompt\", \"answer\"} per line.")
    eval_path: str | None = Field(None, description="JSONL file for evaluation (optional).")
    train_prompts: int = Field(
        4096, ge=0, le=MAX_DATASET_PROMPTS, description="Training prompts to generate for a built-in task, or to read from JSONL (0 = all)."
    )
    eval_prompts: int = Field(64, ge=0, le=MAX_DATASET_PROMPTS, description="Evaluation prompts (built-in task), or cap for eval JSONL (0 = all).")
    max_prompt_tokens: int = Field(64, ge=1, le=MAX_TOKENS, description="Longest prompt allowed, in tokens.")
    tokenizer: Literal["char"] = Field("char", description="Tokenizer: 'char' (built-in character tokenizer).")

    @model_validator(mode="before")
    @classmethod
    def _path_means_jsonl(cls, data: Any) -> Any:
        """A config that names data.train_path reads JSONL: the default task does not apply."""
        if isinstance(data, dict) and data.get("train_path") is not None and "task" not in data:
            return {**data, "task": None}
        return data


class RewardSpec(_Section):
    name: str = Field(..., description="Reward function name.")
    weight: float = Field(1.0, description="Weight in the summed reward.")


class RolloutSection(_Section):
    max_new_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="Completion budget in tokens; null = the task's own budget (64 for JSONL data)."
    )
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature, > 0 (greedy sampling would give every "
                               "group zero advantage). Log-probs use it too.")
    top_k: int = Field(0, ge=0, le=MAX_SEQUENCES, description="Keep the k most likely tokens (0 = off).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass (1.0 = off).")
    stop_at_eos: bool = Field(True, description="Stop a sequence at its EOS token (false: always max_new_tokens).")


class BatchSection(_Section):
    prompts_per_step: int = Field(16, ge=1, le=MAX_PROMPTS, description="Prompts consumed per step (the global batch).")
    mini_batch_prompts: int | None = Field(
        None, ge=1, le=MAX_PROMPTS, description="Prompts per optimizer update; null = prompts_per_step (one update per pass)."
    )
    train_micro_batch_sequences: int | None = Field(
        None, ge=1, le=MAX_SEQUENCES, description="Sequences per forward/backward pass; null = the whole mini-batch. "
        "Gradient accumulation = mini_batch_prompts x G / this (derived)."
    )
    rollout_micro_batch_sequences: int | None = Field(
        None, ge=1, le=MAX_SEQUENCES, description="Sequences per generation call; null = all sequences of the step."
    )
    logprob_micro_batch_sequences: int | None = Field(
        None, ge=1, le=MAX_SEQUENCES, description="Sequences per old-policy / reference log-prob pass; null = train micro-batch."
    )


class GrpoSection(_Section):
    num_generations: int = Field(8, ge=1, le=MAX_GENERATIONS, description="G: completions sampled per prompt.")
    num_iterations: int = Field(1, ge=1, le=MAX_ITERATIONS, description="mu: passes over each step's rollouts.")
    beta: float = Field(0.04, ge=0.0, description="KL penalty weight; 0 = no reference model is loaded.")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator (Schulman's k1/k2/k3).")
    epsilon_low: float = Field(0.2, ge=0.0, lt=1.0, description="Lower clip: ratio >= 1 - epsilon_low.")
    epsilon_high: float = Field(0.2, ge=0.0, description="Upper clip: ratio <= 1 + epsilon_high (DAPO uses 0.28).")
    dual_clip: float | None = Field(
        None, description="Dual-clip constant c > 1 bounding the loss of negative-advantage tokens (null = off)."
    )
    advantage: Literal["grpo", "rloo", "drgrpo"] = Field(
        "grpo", description="grpo: (r - mean)/std per group; rloo: leave-one-out baseline; drgrpo: r - mean."
    )
    advantage_eps: float = Field(1e-6, gt=0.0, description="Added to the group std before dividing (grpo).")
    loss_aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = Field(
        "token-mean", description="How token losses become the mini-batch loss (normalised over the whole mini-batch)."
    )


class ImportanceSamplingSection(_Section):
    """Importance-sampling correction pi_old / pi_generator of asynchronous GRPO (required when async)."""

    enabled: bool = Field(
        True, description="Multiply each token's loss by pi_old / pi_generator (required with async.enabled)."
    )
    level: Literal["token", "sequence"] = Field(
        "token", description="token: one weight per token; sequence: the whole completion's likelihood ratio "
        "(product over its tokens) on every token."
    )
    mode: Literal["clamp", "mask"] = Field(
        "clamp", description="clamp: min(weight, max) (truncated IS); mask: weight 0 outside [min, max]."
    )
    max: float = Field(
        2.0, ge=1.0, description="Upper truncation of a weight (>= 1: on-policy tokens have weight 1)."
    )
    min: float = Field(
        0.0, ge=0.0, le=1.0, description="Lower end of the kept range, mode mask only (0 = no lower end)."
    )


def _device_list(value: Any) -> Any:
    """Lets a device list also be written as text: "0,1", "0 1", "[0, 1]" or "" (as a form or
    --set gives it); a single index becomes a one-element list. Anything else is left to pydantic."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return _guarded_yaml(text)
            except (yaml.YAMLError, _YamlRefused):
                return value
        return [part for part in text.replace(",", " ").split()]
    return value


DeviceList = Annotated[list[Annotated[int, Field(ge=0, le=MAX_DEVICE_INDEX)]], Field(max_length=MAX_DEVICE_INDEX + 1),
                      BeforeValidator(_device_list)]


class AsyncSection(_Section):
    """Asynchronous GRPO: a collector generates with the newest weights it has while the trainer trains on
    trajectories at most max_trajectory_age_steps weight versions old, corrected by importance sampling."""

    enabled: bool = Field(False, description="Asynchronous rollout (collector + replay buffer).")
    max_trajectory_age_steps: int = Field(
        1, ge=0, le=MAX_STEPS, description="How many weight versions old a trajectory may be (weights v train steps v .. v + this; "
        "0 = on-policy, like the synchronous loop)."
    )
    buffer_capacity_groups: int | None = Field(
        None, ge=1, le=MAX_SEQUENCES, description="Replay buffer size in prompt groups (how far ahead of training the collector may "
        "run); null = batch.prompts_per_step x max(1, max_trajectory_age_steps) x 2."
    )
    in_flight_weight_updates: bool = Field(
        False, description="Swap new weights into the generator between decode chunks instead of at a group "
        "boundary (long generations do not hold up the update). The KV cache is kept across a swap, and each "
        "token's recorded log-prob is the one it was sampled with."
    )
    in_flight_chunk_tokens: int = Field(
        8, ge=1, le=MAX_TOKENS, description="With in_flight_weight_updates: decode steps between weight checks (smaller = "
        "newer weights sooner, more host round trips)."
    )
    rollout_devices: DeviceList = Field(
        default_factory=list, description="Device indices for generation, e.g. [1]; empty (with train_devices "
        "empty) = generation and training share the default device."
    )
    train_devices: DeviceList = Field(
        default_factory=list, description="Device indices for training, e.g. [0]; must not overlap rollout_devices."
    )
    importance_sampling: ImportanceSamplingSection = Field(default_factory=ImportanceSamplingSection)


class OptimizerSection(_Section):
    name: Literal["adamw", "adam", "sgd"] = Field("adamw", description="Optax optimizer.")
    learning_rate: float = Field(1e-3, gt=0.0, description="Peak learning rate.")
    schedule: Literal["constant", "cosine", "linear"] = Field(
        "constant", description="Learning-rate shape after warmup (decays to 0 at train.max_steps)."
    )
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS, description="Linear warmup length in steps (the first update "
                              "already gets 1/(warmup updates) of the peak rate).")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay (adamw).")
    b1: float = Field(0.9, ge=0.0, lt=1.0, description="Adam beta1 (sgd: momentum, 0 = none).")
    b2: float = Field(0.999, ge=0.0, lt=1.0, description="Adam beta2.")
    max_grad_norm: float = Field(1.0, ge=0.0, description="Clip gradients to this global norm (0 = off).")


class TrainSection(_Section):
    max_steps: int = Field(100, ge=1, le=MAX_STEPS, description="Steps to run.")
    samples_per_step: int = Field(4, ge=0, le=1_024, description="Rollout samples reported per step.")


class CheckpointSection(_Section):
    every_steps: int = Field(50, ge=0, le=MAX_STEPS, description="Checkpoint period in steps (0 = only at the end).")
    keep_last: int = Field(3, ge=1, le=1_000, description="Keep this many newest checkpoints.")
    keep_best_metric: str | None = Field(None, description="Also keep the best checkpoint by this metric.")
    keep_best_mode: Literal["max", "min"] = Field("max", description="Whether larger or smaller is better.")


class EvalSection(_Section):
    every_steps: int = Field(0, ge=0, le=MAX_STEPS, description="Evaluate every N steps (0 = off).")
    prompts: int = Field(0, ge=0, le=MAX_DATASET_PROMPTS, description="Eval prompts per evaluation (0 = all).")
    temperature: float = Field(0.0, ge=0.0, description="Eval sampling temperature (0 = greedy).")


class ExperimentConfig(_Section):
    """A whole GRPO experiment. See each section's fields for meaning and units."""

    seed: int = Field(0, ge=0, le=MAX_SEED, description="The one seed every random choice derives from "
                     "(0 to 2**32 - 1).")
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    rewards: list[RewardSpec] = Field(
        default_factory=list, max_length=64, description="Rewards and weights; empty = the built-in task's own rewards."
    )
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    batch: BatchSection = Field(default_factory=BatchSection)
    grpo: GrpoSection = Field(default_factory=GrpoSection)
    async_: AsyncSection = Field(default_factory=AsyncSection, alias="async")
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection)
    train: TrainSection = Field(default_factory=TrainSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    eval: EvalSection = Field(default_factory=EvalSection)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict with YAML key names ("async", not "async_")."""
        return self.model_dump(mode="json", by_alias=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: the dotted field and what would fix it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ConfigError(ValueError):
    """Raised for an invalid config; `problems` lists every field that is wrong."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def as_dict(self) -> dict[str, str]:
        """{dotted.field: message}, the shape the REST API returns."""
        out: dict[str, str] = {}
        for p in self.problems:
            out[p.field] = f"{out[p.field]}; {p.message}" if p.field in out else p.message
        return out


# ---------------------------------------------------------------------------------------------
# Loading


YAML_MAX_CHARS = 1_000_000   # longest YAML text accepted
YAML_MAX_VALUES = 10_000     # values a document may stand for once aliases are expanded
MAX_NESTING = 32             # deepest nesting of mappings and lists (a config needs 3)
RAW_MAX_VALUES = 100_000     # values a raw (JSON) config may hold


class _YamlRefused(ValueError):
    """YAML that is well formed but refused: too long, too deep, or too large once aliases expand."""


def _guarded_yaml(text: str) -> Any:
    """yaml.safe_load, after checking (without recursion, so a deep document cannot overflow the
    stack) that `text` is not too long, its nesting not too deep, and its expansion through aliases
    not too large. Raises yaml.YAMLError for malformed YAML and _YamlRefused for the limits."""
    if len(text) > YAML_MAX_CHARS:
        raise _YamlRefused(f"is {len(text)} characters long; the limit is {YAML_MAX_CHARS}")
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # the parser is iterative; the composer recurses
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise _YamlRefused(f"is nested deeper than {MAX_NESTING} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        values, depth = _expanded_shape(root)
        if values > YAML_MAX_VALUES:
            raise _YamlRefused(f"expands to more than {YAML_MAX_VALUES} values through aliases; write it out")
        if depth > MAX_NESTING:
            raise _YamlRefused(f"is nested deeper than {MAX_NESTING} levels once aliases are expanded")
    return yaml.safe_load(text)


def _expanded_shape(root: yaml.Node) -> tuple[int, int]:
    """(values, depth) that `root` stands for once every alias is expanded, computed once per node
    (an alias is the same node object as its anchor), iteratively. A recursive alias is refused."""
    done: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in done:
            continue
        children = _yaml_children(node)
        if children_done:
            on_path.discard(id(node))
            shapes = [done[id(c)] for c in children]
            values = 1 + sum(v for v, _ in shapes)
            done[id(node)] = (min(values, YAML_MAX_VALUES + 1), 1 + max((d for _, d in shapes), default=0))
            continue
        if id(node) in on_path:
            raise _YamlRefused("refers to itself (a recursive alias)")
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in done)
    return done[id(root)]


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml_data(text: str) -> Any:
    """YAML text -> plain data, the one guarded loader of every entry point (CLI, web form, API).

    yaml.safe_load semantics (no object construction), refusing text over YAML_MAX_CHARS, nesting
    deeper than MAX_NESTING and alias expansion beyond YAML_MAX_VALUES values. Raises ConfigError
    with a "(yaml)" problem that says what is wrong."""
    if not isinstance(text, str):
        raise ConfigError([Problem("(yaml)", f"must be text, got {type(text).__name__}")])
    try:
        return _guarded_yaml(text)
    except _YamlRefused as exc:
        raise ConfigError([Problem("(yaml)", f"refused: the YAML {exc}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([Problem("(yaml)", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}")]) from None


def _plain_data_problems(raw: Any) -> list[Problem]:
    """Checks, without recursion, that `raw` is JSON-like data a config can be: at most MAX_NESTING
    deep, at most RAW_MAX_VALUES values (shared sub-objects counted each time they appear), text
    that is valid Unicode (no lone surrogates), numbers, booleans and null."""
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(raw, (), 1)]
    values = 0
    while stack:
        value, loc, depth = stack.pop()
        values += 1
        if values > RAW_MAX_VALUES:
            return [Problem("(config)", f"holds more than {RAW_MAX_VALUES} values; a config is a few dozen")]
        if isinstance(value, (dict, list)) and depth > MAX_NESTING:
            return [Problem(_dotted(loc), f"is nested deeper than {MAX_NESTING} levels")]
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str) or not _is_unicode(key):
                    return [Problem(_dotted(loc), "has a key that is not valid text")]
                stack.append((item, loc + (key,), depth + 1))
        elif isinstance(value, list):
            stack.extend((item, loc + (i,), depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            if not _is_unicode(value):
                return [Problem(_dotted(loc), "contains characters that are not valid Unicode text (a lone "
                                              "surrogate); remove them")]
        elif not (value is None or isinstance(value, (bool, int, float))):
            return [Problem(_dotted(loc), f"must be plain data (text, number, boolean, list or mapping), "
                                          f"got {type(value).__name__}")]
    return []


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_config(raw: dict[str, Any] | None, overrides: list[str] | tuple[str, ...] = (), *,
                 dataset_dirs: list[str] | tuple[str, ...] | None = None) -> ExperimentConfig:
    """Validate a raw dict (from YAML/JSON) plus `--set` overrides; raise ConfigError listing every problem.

    dataset_dirs (the platform's dataset roots): when given, `data.train_path` / `data.eval_path`
    resolve relative to dataset_dirs[0], with `..` and symlinks resolved, and must name a file inside
    one of the roots; the returned config holds the resolved absolute paths. One message covers
    "missing" and "not allowed", so validation never tells whether a file exists. Without it (the
    CLI on a user's own machine) paths are relative to the working directory and unrestricted."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError([Problem("(config)", f"must be a mapping of sections, got {type(raw).__name__}")])
    problems = _plain_data_problems(raw)
    if problems:
        raise ConfigError(problems)
    raw = json.loads(json.dumps(raw))  # deep copy: overrides never touch the caller's dict
    problems = [p for o in overrides for p in _apply_override(raw, o)]
    if problems:
        raise ConfigError(problems)
    try:
        config = ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_problems_from_pydantic(exc, raw)) from None
    problems = _resolve_data_paths(config, dataset_dirs) + check_config(config)
    if problems:
        raise ConfigError(problems)
    return config


def parse_yaml(text: str, overrides: list[str] | tuple[str, ...] = (), *,
               dataset_dirs: list[str] | tuple[str, ...] | None = None) -> ExperimentConfig:
    """Parse YAML text with the guarded loader (`load_yaml_data`) and validate it (`parse_config`)."""
    return parse_config(load_yaml_data(text), overrides, dataset_dirs=dataset_dirs)


def load_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Read a YAML (or JSON) config file and validate it with overrides applied."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError([Problem("(file)", f"cannot read {path}: {exc.strerror}")]) from None
    return parse_yaml(text, overrides)


DATA_PATH_REFUSED = "missing or not allowed: {path}; put the file under the platform's dataset directory"


def _resolve_data_paths(config: ExperimentConfig, dataset_dirs: list[str] | tuple[str, ...] | None) -> list[Problem]:
    """Check `data.train_path` / `data.eval_path` (see `parse_config`); with dataset_dirs, replace
    each by its resolved absolute path inside a root."""
    problems = []
    for name in ("train_path", "eval_path"):
        path = getattr(config.data, name)
        if path is None:
            continue
        if dataset_dirs is None:
            if not os.path.isfile(path):
                problems.append(Problem(f"data.{name}", f"file not found: {path}"))
            continue
        resolved = _inside_roots(path, dataset_dirs)
        if resolved is None:
            problems.append(Problem(f"data.{name}", DATA_PATH_REFUSED.format(path=path)))
        else:
            setattr(config.data, name, resolved)
    return problems


def _inside_roots(path: str, roots: list[str] | tuple[str, ...]) -> str | None:
    """The real path of `path` (relative to roots[0]) if it is a file inside one of `roots`, else None."""
    if not roots or not path or "\0" in path:
        return None
    real_roots = [os.path.realpath(r) for r in roots]
    candidate = os.path.realpath(os.path.join(real_roots[0], path))
    inside = any(os.path.commonpath([candidate, r]) == r for r in real_roots)
    return candidate if inside and os.path.isfile(candidate) else None


def _apply_override(raw: dict[str, Any], override: str) -> list[Problem]:
    """Apply one `dotted.path=value` to `raw` in place; the value is parsed as YAML (8 -> int, true -> bool)."""
    if "=" not in override:
        return [Problem("(--set)", f"'{override}' is not of the form dotted.path=value")]
    path, _, text = override.partition("=")
    path = path.strip()
    try:
        value = _guarded_yaml(text) if text.strip() else None
    except yaml.YAMLError:
        value = text  # not YAML: the text itself
    except _YamlRefused as exc:
        return [Problem(path, f"refused: the value {exc}")]
    keys = path.split(".")
    section_model: type[BaseModel] = ExperimentConfig
    node = raw
    for i, key in enumerate(keys):
        fields = _field_names(section_model)
        if key not in fields:
            return [Problem(".".join(keys[: i + 1]), _unknown_key_message(key, fields))]
        name = _python_name(section_model, key)
        annotation = section_model.model_fields[name].annotation
        if i == len(keys) - 1:
            node[key] = value
            return []
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return [Problem(".".join(keys[: i + 1]), "is a value, not a section; drop the rest of the path")]
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node, section_model = child, annotation
    return []


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _python_name(model: type[BaseModel], key: str) -> str:
    for name, f in model.model_fields.items():
        if (f.alias or name) == key:
            return name
    raise KeyError(key)


def _unknown_key_message(key: str, fields: list[str]) -> str:
    close = difflib.get_close_matches(str(key), fields, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(fields)
    return f"unknown key; {hint}"


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(config)"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the key at the end of `loc`."""
    model: type[BaseModel] = ExperimentConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        try:
            annotation = model.model_fields[_python_name(model, part)].annotation
        except KeyError:
            return None
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        sub = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if sub is None:
            return None
        model = sub
    return model


def _problems_from_pydantic(exc: ValidationError, raw: dict[str, Any]) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = _dotted(loc)
        if err["type"] == "extra_forbidden":
            model = _model_at(loc)
            fields = _field_names(model) if model else []
            problems.append(Problem(field, _unknown_key_message(str(loc[-1]), fields)))
            continue
        value = err.get("input")
        shown = json.dumps(value) if isinstance(value, (int, float, str, bool)) or value is None else type(value).__name__
        if len(shown) > 80:
            shown = shown[:60] + f"... ({len(shown)} characters)"
        message = err["msg"]
        if err["type"] == "literal_error":
            message = f"{shown} is not allowed; {message[0].lower()}{message[1:]}"
        elif err["type"] in ("model_type", "dict_type"):
            message = f"must be a mapping of fields, got {shown}"
        elif err["type"] == "missing":
            message = "is required"
        else:
            message = f"{shown}: {message[0].lower()}{message[1:]}"
        problems.append(Problem(field, message))
    return problems


# ---------------------------------------------------------------------------------------------
# Cross-field checks: everything pydantic's per-field types cannot say.


def _divisors(n: int) -> list[int]:
    """Every divisor of n >= 1, ascending, in O(sqrt(n)) steps."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _choices(values: list[int], most: int = 24) -> str:
    """"1, 2 or 4"; a long list keeps its first and last few values ("1, 2, 3, ..., 512 or 1024")."""
    text = [str(v) for v in values]
    if len(text) > most:
        text = text[: most - 4] + ["..."] + text[-3:]
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + " or " + text[-1]


def check_config(config: ExperimentConfig) -> list[Problem]:
    """Every cross-field rule; returns the problems (empty = valid)."""
    problems: list[Problem] = []
    problems += _check_batch(config)
    problems += _check_grpo(config)
    problems += _check_data_and_rewards(config)
    problems += _check_model(config)
    problems += _check_checkpoint(config)
    problems += _check_async(config)
    return problems


def _check_batch(config: ExperimentConfig) -> list[Problem]:
    b, g = config.batch, config.grpo.num_generations
    problems = []
    prompts = b.prompts_per_step
    mini = b.mini_batch_prompts or prompts
    if prompts % mini:
        problems.append(Problem(
            "batch.mini_batch_prompts",
            f"batch.mini_batch_prompts={mini} does not divide batch.prompts_per_step={prompts}; "
            f"use {_choices(_divisors(prompts))}",
        ))
        return problems
    mini_sequences = mini * g
    step_sequences = prompts * g
    if b.train_micro_batch_sequences is not None and mini_sequences % b.train_micro_batch_sequences:
        problems.append(Problem(
            "batch.train_micro_batch_sequences",
            f"batch.train_micro_batch_sequences={b.train_micro_batch_sequences} does not divide the mini-batch of "
            f"{mini_sequences} sequences (batch.mini_batch_prompts={mini} x grpo.num_generations={g}); "
            f"use {_choices(_divisors(mini_sequences))}",
        ))
    for name in ("rollout_micro_batch_sequences", "logprob_micro_batch_sequences"):
        value = getattr(b, name)
        if value is not None and step_sequences % value:
            problems.append(Problem(
                f"batch.{name}",
                f"batch.{name}={value} does not divide the step's {step_sequences} sequences "
                f"(batch.prompts_per_step={prompts} x grpo.num_generations={g}); "
                f"use {_choices(_divisors(step_sequences))}",
            ))
    return problems


def _check_async(config: ExperimentConfig) -> list[Problem]:
    """Async-section rules; the device and range rules hold whether or not async is enabled."""
    a, prompts = config.async_, config.batch.prompts_per_step
    is_ = a.importance_sampling
    problems = []
    if a.enabled and not is_.enabled:
        problems.append(Problem(
            "async.importance_sampling.enabled",
            "asynchronous GRPO trains on trajectories sampled by older weights and needs the importance-sampling "
            "correction to stay unbiased; set async.importance_sampling.enabled=true (or async.enabled=false)",
        ))
    if is_.min >= is_.max:
        problems.append(Problem(
            "async.importance_sampling.min",
            f"async.importance_sampling.min={is_.min} must be below async.importance_sampling.max={is_.max}",
        ))
    if is_.mode == "clamp" and is_.min > 0:
        problems.append(Problem(
            "async.importance_sampling.min",
            f"async.importance_sampling.min={is_.min} is only used with mode mask; set it to 0 or set "
            "async.importance_sampling.mode=mask",
        ))
    if a.buffer_capacity_groups is not None and a.buffer_capacity_groups < prompts:
        problems.append(Problem(
            "async.buffer_capacity_groups",
            f"async.buffer_capacity_groups={a.buffer_capacity_groups} cannot hold one step's "
            f"batch.prompts_per_step={prompts} groups, so no step could start; use {prompts} or more, or null "
            "for the default",
        ))
    for name in ("rollout_devices", "train_devices"):
        devices = getattr(a, name)
        repeated = sorted({d for d in devices if devices.count(d) > 1})
        if repeated:
            problems.append(Problem(f"async.{name}", f"lists device {_choices(repeated).replace(' or ', ' and ')} "
                                                     "more than once; list each device once"))
    shared = sorted(set(a.rollout_devices) & set(a.train_devices))
    if shared:
        problems.append(Problem(
            "async.train_devices",
            f"device {_choices(shared).replace(' or ', ' and ')} is in both async.rollout_devices and "
            "async.train_devices; give generation and training disjoint devices, or leave both empty to share "
            "the default device",
        ))
    for name, other in (("rollout_devices", "train_devices"), ("train_devices", "rollout_devices")):
        if getattr(a, other) and not getattr(a, name):
            problems.append(Problem(
                f"async.{name}",
                f"is empty while async.{other}={getattr(a, other)}; list the {name.split('_')[0]} devices too, "
                "or leave both empty to share the default device",
            ))
    # Each micro-batch is split over its devices along the batch axis.
    b, g = config.batch, config.grpo.num_generations
    train_micro = b.train_micro_batch_sequences or (b.mini_batch_prompts or prompts) * g
    sizes = {"rollout_micro_batch_sequences": (b.rollout_micro_batch_sequences or prompts * g, "rollout_devices"),
             "train_micro_batch_sequences": (train_micro, "train_devices"),
             "logprob_micro_batch_sequences": (b.logprob_micro_batch_sequences or train_micro, "train_devices")}
    for name, (sequences, devices) in sizes.items():
        count = len(getattr(a, devices))
        if count > 1 and sequences % count:
            problems.append(Problem(
                f"batch.{name}",
                f"micro-batches of {sequences} sequences cannot be split evenly over the {count} devices of "
                f"async.{devices}; make batch.{name} a multiple of {count}, or list "
                f"{_choices([d for d in _divisors(sequences) if d <= count])} device(s)",
            ))
    return problems


def _check_grpo(config: ExperimentConfig) -> list[Problem]:
    g = config.grpo
    problems = []
    if g.num_generations < 2:
        problems.append(Problem(
            "grpo.num_generations",
            f"grpo.num_generations={g.num_generations}: group-relative advantages need at least 2 completions "
            "per prompt; use 2 or more (8 is typical)",
        ))
    if config.rollout.temperature == 0:
        problems.append(Problem(
            "rollout.temperature",
            "rollout.temperature=0 samples greedily, so all G completions of a prompt are the same, every "
            "group's advantage is 0 and nothing is learned; use a temperature > 0 (1.0 is typical; "
            "eval.temperature=0 gives greedy evaluation)",
        ))
    if g.dual_clip is not None and g.dual_clip <= 1.0:
        problems.append(Problem("grpo.dual_clip", f"grpo.dual_clip={g.dual_clip} must be > 1 (3.0 is typical), or null"))
    return problems


def _check_data_and_rewards(config: ExperimentConfig) -> list[Problem]:
    from trainers.rewards import REWARD_NAMES
    from trainers.tasks import TASKS

    d = config.data
    problems = []
    if d.task is not None and d.train_path is not None:
        problems.append(Problem("data.task", "set either data.task or data.train_path, not both (data.task=null for JSONL)"))
    elif d.task is None and d.train_path is None:
        problems.append(Problem("data.task", "no data: name a built-in task or set data.train_path to a JSONL file"))
    if d.task is not None and d.task not in TASKS:
        problems.append(Problem("data.task", f"unknown task '{d.task}'; {_one_of(d.task, sorted(TASKS))}"))
    if d.task is None and not config.rewards:
        problems.append(Problem(
            "rewards", "is empty; with data.train_path name at least one reward, e.g. [{name: exact_match, weight: 1.0}]"
        ))
    for i, spec in enumerate(config.rewards):
        if spec.name not in REWARD_NAMES:
            problems.append(Problem(f"rewards[{i}].name", f"unknown reward '{spec.name}'; {_one_of(spec.name, REWARD_NAMES)}"))
    if config.rewards and all(spec.weight == 0 for spec in config.rewards):
        problems.append(Problem("rewards", "every weight is 0, so nothing is learned; give one reward a non-zero weight"))
    return problems


def _check_model(config: ExperimentConfig) -> list[Problem]:
    from trainers.presets import PRESETS
    from trainers.tokenizer import get_tokenizer

    m = config.model
    if m.preset not in PRESETS:
        return [Problem("model.preset", f"unknown preset '{m.preset}'; {_one_of(m.preset, sorted(PRESETS))}")]
    vocab_tokens = get_tokenizer(config.data.tokenizer).vocab_size
    if PRESETS[m.preset].vocab_size < vocab_tokens:
        return [Problem(
            "model.preset",
            f"preset '{m.preset}' has vocab {PRESETS[m.preset].vocab_size} < the tokenizer's {vocab_tokens}; "
            "pick a larger preset",
        )]
    return []


def _check_checkpoint(config: ExperimentConfig) -> list[Problem]:
    from trainers.metrics import METRIC_NAMES

    metric = config.checkpoint.keep_best_metric
    if metric is not None and metric not in METRIC_NAMES:
        return [Problem("checkpoint.keep_best_metric", f"unknown metric '{metric}'; {_one_of(metric, METRIC_NAMES)}")]
    if metric is not None and metric.startswith("eval/") and config.eval.every_steps == 0:
        return [Problem(
            "checkpoint.keep_best_metric",
            f"'{metric}' is only measured with evaluation on; set eval.every_steps > 0 or pick a training metric",
        )]
    return []


def _one_of(value: str, names: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, list(names), n=1, cutoff=0.5)
    return (f"did you mean '{close[0]}'? " if close else "") + "choose one of: " + ", ".join(names)


# ---------------------------------------------------------------------------------------------
# Field specs: the schema described as plain data, so a form can be generated from it (the web
# platform's experiment form has no field list of its own).


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One config field as a form needs it.

    `path` is the dotted YAML path (`batch.mini_batch_prompts`; a field of a sub-section has the
    whole path, `async.importance_sampling.max`; an item field of a list is just its key, `name`).
    `kind` is one of "int", "float", "bool", "str", "choice" (a Literal: see `choices`), "list" (a
    list of mappings: see `item_fields`) or "int_list" (a list of integers, which the schema also
    accepts as text: "0,1" or "[0, 1]"); `nullable` says whether null is
    allowed (so "optional int" is kind "int", nullable True). `default` is JSON-able plain data.
    `required` fields have no default (`default` is then None). `bounds` holds the numeric
    limits among ge/gt/le/lt. `suggestions` lists the known values of
    a free-text field (model presets, tasks, reward and metric names) - the same lists the
    cross-field checks accept.
    """

    path: str
    kind: str
    nullable: bool
    default: Any
    description: str
    choices: tuple[Any, ...] = ()
    bounds: tuple[tuple[str, float], ...] = ()
    suggestions: tuple[str, ...] = ()
    item_fields: tuple["FieldSpec", ...] = ()
    required: bool = False

    @property
    def key(self) -> str:
        """The path within its section (`mini_batch_prompts`, `importance_sampling.max`)."""
        return self.path.split(".", 1)[-1]

    @property
    def section(self) -> str:
        """The top-level section (`batch`), or "" for a top-level field such as `seed`."""
        return self.path.split(".", 1)[0] if "." in self.path else ""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for a page's script)."""
        out = dataclasses.asdict(self)
        out["bounds"] = dict(self.bounds)
        out["item_fields"] = [f.as_dict() for f in self.item_fields]
        return out


@dataclasses.dataclass(frozen=True)
class SectionSpec:
    """A group of fields in schema order: a section (`batch`), a top-level list (`rewards`), or
    key "" for the top-level values (`seed`)."""

    key: str
    description: str
    fields: tuple[FieldSpec, ...]


def _known_values() -> dict[str, tuple[str, ...]]:
    """Dotted path -> the names its cross-field check accepts (imported lazily, as the checks do)."""
    from trainers.metrics import METRIC_NAMES
    from trainers.presets import PRESETS
    from trainers.rewards import REWARD_NAMES
    from trainers.tasks import TASKS

    return {
        "model.preset": tuple(PRESETS),
        "data.task": tuple(TASKS),
        "rewards.name": tuple(REWARD_NAMES),
        "checkpoint.keep_best_metric": tuple(METRIC_NAMES),
    }


def _bounds(field: Any) -> tuple[tuple[str, float], ...]:
    out = []
    for meta in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            value = getattr(meta, name, None)
            if value is not None:
                out.append((name, value))
    return tuple(out)


def _scalar(annotation: Any) -> Any:
    """`Annotated[int, ...]` -> int; anything else unchanged."""
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _section_field_specs(model: type[BaseModel], prefix: str, known: dict[str, tuple[str, ...]]) -> list[FieldSpec]:
    """The leaf fields of a section, in schema order; a sub-section's fields (`async.importance_sampling`)
    come flattened in its place, with their full dotted paths."""
    out: list[FieldSpec] = []
    for n, f in model.model_fields.items():
        path = f"{prefix}.{f.alias or n}"
        if _is_section(f.annotation):
            out += _section_field_specs(f.annotation, path, known)
        else:
            out.append(_field_spec(model, n, path, known))
    return out


def _field_spec(model: type[BaseModel], name: str, path: str, known: dict[str, tuple[str, ...]]) -> FieldSpec:
    field = model.model_fields[name]
    annotation = field.annotation
    args = typing.get_args(annotation)
    nullable = type(None) in args and typing.get_origin(annotation) in (typing.Union, types.UnionType)
    if nullable:
        rest = [a for a in args if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else annotation
    choices: tuple[Any, ...] = ()
    item_fields: tuple[FieldSpec, ...] = ()
    if typing.get_origin(annotation) is Literal:
        kind, choices = "choice", typing.get_args(annotation)
    elif typing.get_origin(annotation) is list and _scalar(typing.get_args(annotation)[0]) is int:
        kind = "int_list"
    elif typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        kind = "list"
        item_known = {k.split(".", 1)[1]: v for k, v in known.items() if k.startswith(path + ".")}
        item_fields = tuple(_field_spec(item, n, f.alias or n, item_known) for n, f in item.model_fields.items())
    elif annotation in (bool, int, float, str):
        kind = annotation.__name__
    else:  # pragma: no cover - a new field type needs a kind here
        raise TypeError(f"{path}: no form kind for {annotation!r}")
    required = field.is_required()
    default = None if required else field.get_default(call_default_factory=True)
    if isinstance(default, list):
        default = [d.model_dump(mode="json", by_alias=True) if isinstance(d, BaseModel) else d for d in default]
    return FieldSpec(
        path=path,
        kind=kind,
        nullable=nullable,
        default=default,
        description=field.description or "",
        choices=choices,
        bounds=_bounds(field),
        suggestions=known.get(path, ()),
        item_fields=item_fields,
        required=required,
    )


@functools.lru_cache(maxsize=1)
def field_specs() -> tuple[SectionSpec, ...]:
    """Every field of ExperimentConfig, in schema order, grouped by section.

    Sections are the nested models (`model`, `data`, ..., `async`, ...) and the top-level list
    `rewards`; top-level values (`seed`) form the section with key "" at the place of the first
    one. A sub-section inside a section (`async.importance_sampling`) is not a section of its
    own: its fields are listed in the outer section, in its place, with their full dotted paths.
    Section descriptions are the section class's own docstring, if any.
    """
    known = _known_values()
    sections: list[SectionSpec] = []
    top_values: list[FieldSpec] = []
    top_index: int | None = None
    for name, field in ExperimentConfig.model_fields.items():
        key = field.alias or name
        annotation = field.annotation
        if _is_section(annotation):
            fields = tuple(_section_field_specs(annotation, key, known))
            doc = annotation.__dict__.get("__doc__") or field.description or ""
            sections.append(SectionSpec(key, inspect.cleandoc(doc), fields))
            continue
        spec = _field_spec(ExperimentConfig, name, key, known)
        if spec.kind == "list":
            sections.append(SectionSpec(key, spec.description, (spec,)))
        else:
            if top_index is None:
                top_index = len(sections)
            top_values.append(spec)
    if top_values:
        sections.insert(top_index or 0, SectionSpec("", "", tuple(top_values)))
    return tuple(sections)


def iter_field_specs() -> list[FieldSpec]:
    """Every field of `field_specs()`, flattened in order (a list field counts once)."""
    return [f for section in field_specs() for f in section.fields]
