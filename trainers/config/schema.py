"""The one experiment config schema: every section and field, with defaults, bounds and help.

Everything that describes an experiment lives here, once: the CLI, YAML files, and the web
platform's form and REST API all load and validate through `trainers.config.parse_config`.
Units are in the names: a *prompt* is one dataset item; a *sequence* is one prompt with one of
its G completions; a *step* consumes `batch.prompts_per_step` prompts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from trainers.algo.names import (
    ADVANTAGES,
    AGGREGATIONS,
    DYNAMIC_SAMPLING_METRICS,
    KL_ESTIMATORS,
    MISMATCH_CORRECTIONS,
    OPTIMIZERS,
    POLICY_LOSSES,
    SCHEDULES,
)
from trainers.config.yaml_guard import YamlRefused, guarded_yaml
from trainers.data.judge_prompt import JUDGE_MODES
from trainers.data.tasks import TASKS
from trainers.models.lora_targets import DEFAULT_TARGET_MODULES

# Upper bounds of the size fields: far above any real run, low enough that no request can make the
# server build a plan, an error message or a dataset of absurd size.
MAX_SEED = 2**32 - 1  # jax.random.key and grain both take 32-bit seeds
MAX_PROMPTS = 65_536  # prompts per step / per mini-batch
MAX_SEQUENCES = 1_048_576  # sequences per micro-batch
MAX_GENERATIONS = 1_024  # G
MAX_ITERATIONS = 64  # mu
MAX_TOKENS = 131_072  # prompt or completion length
MAX_DATASET_PROMPTS = 10_000_000  # prompts generated or read
MAX_STEPS = 10_000_000  # steps, and every period counted in steps
MAX_DEVICE_INDEX = 4_095
MAX_HOSTS = 4_096  # hosts (processes) of one run
MAX_ENV_TURNS = 64  # assistant turns of one episode


class _Section(BaseModel):
    """Base for every section: unknown keys are refused, values are checked on assignment, and
    numbers must be finite (NaN and infinity are refused: no JSON column can store them)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True, allow_inf_nan=False)


class LoraSection(_Section):
    """LoRA adapters (Qwix): only the adapters train; the base weights stay frozen and shared."""

    rank: int = Field(
        0,
        ge=0,
        le=65_536,
        description="Adapter rank r (0 = off: full fine-tuning). "
        "Each targeted projection W [in, out] gets A [in, r] and B [r, out]; r must not exceed "
        "min(in, out).",
    )
    alpha: float = Field(32.0, gt=0.0, description="Scale: the adapters add (alpha / rank) x A B to W.")
    dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input (only 0 is supported for now)."
    )
    target_modules: str = Field(
        DEFAULT_TARGET_MODULES,
        max_length=1_000,
        description="A regex that must match a projection's whole "
        "module path, e.g. blocks/0/attn/q_proj or blocks/11/mlp/down_proj; the default takes every attention "
        "and MLP projection.",
    )


class ModelSection(_Section):
    path: str | None = Field(
        None,
        description="A local Hugging Face model folder (config.json, *.safetensors, tokenizer files) of a "
        "LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM; training starts from its weights and uses its "
        "tokenizer. null = a randomly initialised model.preset.",
    )
    preset: str = Field(
        "tiny",
        description="Named size of a randomly initialised model (when model.path is null): "
        "tiny, small, w1, base, qwen3-0.6b, smollm2-135m, qwen2-0.5b.",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Compute dtype. Parameters (master weights), optimizer state, log-probs and the loss stay float32.",
    )
    remat: bool | None = Field(
        None,
        description="Recompute each block's activations in the backward pass instead of "
        "storing them (less memory, about a third more compute). null: on when the step's memory "
        "estimate without it is more than the memory the run has (this machine's, or one "
        "accelerator's).",
    )
    lora: LoraSection = Field(default_factory=LoraSection)


class DataSection(_Section):
    task: str | None = Field(
        "arithmetic", description="Built-in task (arithmetic, reverse, countdown, ...); null to use data.train_path."
    )
    train_path: str | None = Field(None, description="JSONL file, one {\"prompt\", \"answer\"} per line.")
    eval_path: str | None = Field(None, description="JSONL file for evaluation (optional).")
    train_dataset: str | None = Field(
        None,
        max_length=256,
        description="On the platform: an uploaded dataset by name (yours as 'name', one "
        "shared with you as 'owner/name') instead of data.train_path; the platform resolves it to its file.",
    )
    eval_dataset: str | None = Field(
        None,
        max_length=256,
        description="On the platform: an uploaded dataset by name for evaluation (optional), "
        "instead of data.eval_path.",
    )
    train_prompts: int = Field(
        4096,
        ge=0,
        le=MAX_DATASET_PROMPTS,
        description="Training prompts to generate for a built-in task, or to read from JSONL (0 = all).",
    )
    eval_prompts: int = Field(
        64,
        ge=0,
        le=MAX_DATASET_PROMPTS,
        description="Evaluation prompts (built-in task), or cap for eval JSONL (0 = all).",
    )
    max_prompt_tokens: int = Field(64, ge=1, le=MAX_TOKENS, description="Longest prompt allowed, in tokens.")
    tokenizer: Literal["auto", "char", "model"] = Field(
        "auto",
        description="auto: the model folder's own tokenizer with model.path, else 'char' (the built-in "
        "character tokenizer of the toy tasks); model: the folder's tokenizer.json.",
    )
    chat_template: bool | None = Field(
        None,
        description="Render each prompt with the tokenizer's chat template (a prompt may then be a list of "
        "{role, content} messages); null = on when the tokenizer has a template.",
    )
    system_prompt: str | None = Field(
        None,
        max_length=20_000,
        description="With the chat template: a system message put before each prompt that has none.",
        json_schema_extra={"multiline": True},  # a form shows a text area (form_specs)
    )

    @model_validator(mode="before")
    @classmethod
    def _path_means_jsonl(cls, data: Any) -> Any:
        """A config that names data.train_path (or data.train_dataset) reads JSONL: the default task
        does not apply."""
        names_jsonl = isinstance(data, dict) and (
            data.get("train_path") is not None or data.get("train_dataset") is not None
        )
        if names_jsonl and "task" not in data:
            return {**data, "task": None}
        return data


class RewardSpec(_Section):
    name: str = Field(..., description="Reward function name.")
    weight: float = Field(1.0, description="Weight in the summed reward.")


class JudgeSection(_Section):
    """A second model that scores completions: the `judge` reward (rewards: [{name: judge, weight: 1}]).
    Read only when that reward is listed."""

    model_path: str | None = Field(
        None,
        description="The judge: a local Hugging Face model folder (like model.path: a Llama, Qwen2 or Qwen3 "
        "causal LM with its tokenizer). Required when the judge reward is listed.",
    )
    mode: Literal[JUDGE_MODES] = Field(
        "yes_no",
        description="yes_no: one forward pass over the judge prompt, score = p(yes) / (p(yes) + p(no)) of "
        "its next token. number: greedy generation of up to judge.max_new_tokens tokens, score = the first "
        "number written / judge.scale, clipped to [0, 1] (0 when there is none).",
    )
    template: str | None = Field(
        None,
        max_length=20_000,
        description="The judge prompt, with {question}, {reference} (the example's answer) and "
        "{completion} (required) replaced by their text; null = the built-in one for judge.mode.",
        json_schema_extra={"multiline": True},
    )
    chat_template: bool | None = Field(
        None,
        description="Render the judge prompt as one user message with the judge's chat template "
        "(null = when its tokenizer has one).",
    )
    max_new_tokens: int = Field(8, ge=1, le=1_024, description="number mode: tokens the judge may write.")
    scale: float = Field(10.0, gt=0.0, le=1e9, description="number mode: the number that means a score of 1.")
    max_prompt_tokens: int = Field(
        1_024,
        ge=1,
        le=MAX_TOKENS,
        description="Longest judge prompt, in tokens; a completion whose prompt is longer scores 0 "
        "(the reason is in its details).",
    )
    micro_batch_sequences: int = Field(
        16, ge=1, le=MAX_SEQUENCES, description="Judge prompts per forward pass (the last one is padded to it)."
    )
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="The judge's compute dtype.")
    device: int | None = Field(
        None,
        ge=0,
        le=MAX_DEVICE_INDEX,
        description="Index of the device that holds the judge; null = the first rollout device "
        "(mesh.rollout_devices), else the default device.",
    )


class RolloutSection(_Section):
    max_new_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Completion budget in tokens; null = the task's own budget (64 for JSONL data).",
    )
    temperature: float = Field(
        1.0,
        ge=0.0,
        description="Sampling temperature, > 0 (greedy sampling would give every "
        "group zero advantage). Log-probs use it too.",
    )
    top_k: int = Field(0, ge=0, le=MAX_SEQUENCES, description="Keep the k most likely tokens (0 = off).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass (1.0 = off).")
    stop_at_eos: bool = Field(True, description="Stop a sequence at its EOS token (false: always max_new_tokens).")
    dynamic_sampling: bool = Field(
        False,
        description="DAPO dynamic sampling: drop every group whose G rewards are all equal (it teaches "
        "nothing) and keep generating prompts, without rounds, until the step holds batch.prompts_per_step "
        "informative groups, or batch.prompts_per_step x (1 + rollout.dynamic_sampling_max_rounds) prompts are "
        "consumed (the rest of the step is then left out of the loss). Informative groups still generating "
        "when the step is full carry over to the next step, weighed by async.importance_sampling as one step "
        "stale. The data position counts every prompt consumed. Asynchronous runs filter their buffered "
        "groups the same way.",
    )
    dynamic_sampling_max_rounds: int = Field(
        4,
        ge=0,
        le=MAX_STEPS,
        description="With dynamic sampling: a step consumes at most batch.prompts_per_step "
        "x (1 + this) prompts, in steps' worth of prompts beyond its own.",
    )
    dynamic_sampling_metric: Literal[DYNAMIC_SAMPLING_METRICS] = Field(
        "reward",
        description="With dynamic sampling or prompt selection: what makes a group flat. reward: its G rewards are all "
        "equal (advantage 0 everywhere); correct: its answers are all right or all wrong, whatever other reward "
        "terms (an overlong penalty, a format reward) add: DAPO's own filter, on accuracy.",
    )
    prompt_selection: bool = Field(
        False,
        description="Skip, before generating them, prompts whose last groups were flat (all right or all wrong, "
        "as rollout.dynamic_sampling_metric says): a prompt is skipped with probability min("
        "rollout.prompt_selection_max_skip_probability, 1 - (1 - rollout.prompt_selection_base_skip_probability)"
        "^streak), streak = its flat groups since its last mixed one, and the step takes the next prompt instead. "
        "Skipped prompts cost no generation and move the data position; each prompt's history is in the "
        "checkpoint. Acts only when prompts come round again: a training set of a few epochs within the run. "
        "Synchronous runs only.",
    )
    prompt_selection_base_skip_probability: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="With prompt selection: the skip probability after one flat group (the streak's base).",
    )
    prompt_selection_max_skip_probability: float = Field(
        0.9,
        gt=0.0,
        lt=1.0,
        description="With prompt selection: the most a prompt is ever skipped with, so 1 - this is the chance "
        "every prompt keeps to come back (exploration).",
    )
    overlong_buffer_tokens: int = Field(
        0,
        ge=0,
        le=MAX_TOKENS,
        description="DAPO soft overlong punishment: a completion longer than "
        "max_new_tokens - this gets a penalty growing linearly to -rollout.overlong_penalty at max_new_tokens, "
        "added to its reward (0 = off).",
    )
    overlong_penalty: float = Field(
        1.0, ge=0.0, description="The overlong penalty at max_new_tokens (with rollout.overlong_buffer_tokens > 0)."
    )
    overlong_filter: bool = Field(
        False,
        description="Leave truncated completions (no end of sequence within max_new_tokens) out of the "
        "loss: their reward says nothing about an answer they never finished.",
    )
    decode_slots: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQUENCES,
        description="Sequences the generation engine decodes at once; a slot is refilled "
        "from the waiting sequences as soon as its sequence ends. null = batch.rollout_micro_batch_sequences (the "
        "memory plan's size), and on an accelerator more, in whole groups up to a generation's sequences, as "
        "long as the KV pages fit in half the device's free memory.",
    )
    decode_chunk_tokens: int = Field(
        16,
        ge=1,
        le=MAX_TOKENS,
        description="Most decode steps between two visits of the engine's host loop, which "
        "refills ended slots; a chunk ends sooner once a waiting group fits the slots freed, or the slots still "
        "running fit a smaller bucket (smaller = weights in flight and turns reach the slots sooner, more host "
        "round trips).",
    )
    prefill_chunk_tokens: int = Field(
        512,
        ge=0,
        le=MAX_TOKENS,
        description="When a step's prompts are padded wider than this, the engine "
        "prefills them in pieces of at most this many tokens, one piece between two decode chunks, so the "
        "sequences already decoding never wait for a whole long prompt, short prompts do not pay for the long "
        "ones' width, and a prefill's memory stays bounded (0 = every prompt at once).",
    )


class BatchSection(_Section):
    prompts_per_step: int = Field(16, ge=1, le=MAX_PROMPTS, description="Prompts consumed per step (the global batch).")
    mini_batch_prompts: int | None = Field(
        None,
        ge=1,
        le=MAX_PROMPTS,
        description="Prompts per optimizer update; null = prompts_per_step (one update per pass).",
    )
    train_micro_batch_sequences: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQUENCES,
        description="Sequences per forward/backward pass; null = the whole mini-batch. "
        "Gradient accumulation = mini_batch_prompts x G / this (derived).",
    )
    rollout_micro_batch_sequences: int | None = Field(
        None, ge=1, le=MAX_SEQUENCES, description="Sequences per generation call; null = all sequences of the step."
    )
    logprob_micro_batch_sequences: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQUENCES,
        description="Sequences per old-policy / reference log-prob pass; null = train micro-batch.",
    )
    train_micro_batch_tokens: int | None = Field(
        None,
        ge=16,
        le=1 << 24,
        description="With packing: token positions per packed update micro-batch (rows x row length); an "
        "update's rows go into as few such micro-batches as hold them. null = the positions a padded "
        "micro-batch of train_micro_batch_sequences computes (the memory estimate's); larger: fewer, "
        "larger micro-batches and more memory.",
    )
    logprob_micro_batch_tokens: int | None = Field(
        None,
        ge=16,
        le=1 << 24,
        description="With packing: token positions per packed old-policy / reference log-prob micro-batch "
        "(rows x row length); a step's rows go into as few such micro-batches as hold them. null = the "
        "positions a padded micro-batch of logprob_micro_batch_sequences computes (the memory "
        "estimate's); larger: fewer, larger passes and more memory.",
    )
    packing: bool = Field(
        True,
        description="Pack each micro-batch's sequences end to end in rows (a group's prompt once, each "
        "completion seeing its prompt and itself) in the log-prob passes and updates, where that computes "
        "at most 0.8 of the padded positions: long-tailed completion lengths. false = always padded rows.",
    )


class MismatchSection(_Section):
    """The gap between the sampler's log-probs (decoded with a KV cache from the generation copy, in
    model.dtype) and the trainer's (one forward pass), both of the full temperature-scaled distribution
    (before top-k / top-p): reported every step (mismatch/*), and corrected per token or sequence by the
    ratio r = pi_trainer / pi_sampler when `correction` says so (trainers/algo/mismatch.py)."""

    correction: Literal[MISMATCH_CORRECTIONS.names()] = Field(
        "none",
        description="none: report only; tis: min(r, max) per token; mis: a sequence's ratio, 0 when above max "
        "or below mis_min; icepop: r per token, 0 outside [min, max]; geo-mask: drop a sequence whose "
        "geometric-mean ratio is outside [min, max].",
    )
    max: float = Field(2.0, ge=1.0, le=1e6, description="Upper bound of the ratio (tis, mis, icepop, geo-mask).")
    min: float = Field(
        0.5, ge=0.0, lt=1.0, description="Lower bound of the ratio (icepop, geo-mask; 0 = no lower bound)."
    )
    mis_min: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Lower bound of mis's sequence ratio (the product of the token ratios): a sequence whose "
        "ratio is below it weighs 0. 0 = no lower bound (Liu et al.'s mis).",
    )


class GrpoSection(_Section):
    num_generations: int = Field(8, ge=1, le=MAX_GENERATIONS, description="G: completions sampled per prompt.")
    num_iterations: int = Field(1, ge=1, le=MAX_ITERATIONS, description="mu: passes over each step's rollouts.")
    beta: float = Field(0.04, ge=0.0, description="KL penalty weight; 0 = no reference model is loaded.")
    kl_estimator: Literal[KL_ESTIMATORS.names()] = Field("k3", description="KL estimator (Schulman's k1/k2/k3).")
    policy_loss: Literal[POLICY_LOSSES.names()] = Field(
        "grpo",
        description="grpo: PPO's clipped surrogate per token; gspo: the clipped sequence-level ratio "
        "(geometric mean of the token ratios); gspo-token: GSPO's value with a gradient per token; cispo: the "
        "clipped importance weight (no gradient) times A times log-prob, so clipped tokens still learn.",
    )
    epsilon_low: float | None = Field(
        None,
        ge=0.0,
        lt=1.0,
        description="Lower clip: ratio >= 1 - epsilon_low; null = the policy loss's "
        "default (grpo 0.2, gspo 3e-4, cispo 1.0: no lower clip).",
    )
    epsilon_high: float | None = Field(
        None,
        ge=0.0,
        description="Upper clip: ratio <= 1 + epsilon_high; null = the policy loss's default "
        "(grpo 0.2, DAPO uses 0.28; gspo 4e-4; cispo 4.0, a weight of at most 5).",
    )
    dual_clip: float | None = Field(
        None,
        description="Dual-clip constant c > 1 bounding the loss of negative-advantage tokens (grpo loss "
        "only; null = off).",
    )
    entropy_coef: float = Field(
        0.0, ge=0.0, description="Entropy bonus: subtract this x the mean token entropy from the loss (0 = off)."
    )
    advantage: Literal[ADVANTAGES.names()] = Field(
        "grpo", description="grpo: (r - mean)/std per group; drgrpo: r - mean (Dr. GRPO); rloo: leave-one-out baseline."
    )
    advantage_eps: float = Field(1e-6, gt=0.0, description="Added to the group std before dividing (grpo).")
    loss_aggregation: Literal[AGGREGATIONS.names()] = Field(
        "token-mean",
        description="How token losses become the mini-batch loss: token-mean (DAPO), "
        "seq-mean-token-mean (GRPO), seq-mean-token-sum, seq-mean-token-sum-norm (Dr. GRPO: token sums "
        "divided by the completion budget). Normalised over the whole mini-batch; a sequence with no loss token "
        "(left out of the loss) counts in no normaliser.",
    )
    mismatch: MismatchSection = Field(default_factory=MismatchSection)


class ImportanceSamplingSection(_Section):
    """Importance-sampling correction pi_old / pi_generator of asynchronous GRPO (required when async)."""

    enabled: bool = Field(
        True, description="Multiply each token's loss by pi_old / pi_generator (required with async.enabled)."
    )
    level: Literal["token", "sequence"] = Field(
        "token",
        description="token: one weight per token; sequence: the whole completion's likelihood ratio "
        "(product over its tokens) on every token.",
    )
    mode: Literal["clamp", "mask"] = Field(
        "clamp", description="clamp: min(weight, max) (truncated IS); mask: weight 0 outside [min, max]."
    )
    max: float = Field(2.0, ge=1.0, description="Upper truncation of a weight (>= 1: on-policy tokens have weight 1).")
    min: float = Field(
        0.0, ge=0.0, le=1.0, description="Lower end of the kept range, mode mask only (0 = no lower end)."
    )


def parse_device_list(value: Any) -> Any:
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
                return guarded_yaml(text)
            except (yaml.YAMLError, YamlRefused):
                return value
        return [part for part in text.replace(",", " ").split()]
    return value


DeviceList = Annotated[
    list[Annotated[int, Field(ge=0, le=MAX_DEVICE_INDEX)]],
    Field(max_length=MAX_DEVICE_INDEX + 1),
    BeforeValidator(parse_device_list),
]


class AsyncSection(_Section):
    """Asynchronous GRPO: a collector generates with the newest weights it has while the trainer trains on
    trajectories at most max_trajectory_age_steps weight versions old, corrected by importance sampling."""

    enabled: bool = Field(False, description="Asynchronous rollout (collector + replay buffer).")
    max_trajectory_age_steps: int = Field(
        1,
        ge=0,
        le=MAX_STEPS,
        description="How many weight versions old a trajectory may be (weights v train steps v .. v + this; "
        "0 = on-policy, like the synchronous loop).",
    )
    buffer_capacity_groups: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQUENCES,
        description="Replay buffer size in prompt groups (how far ahead of training the collector may "
        "run); null = batch.prompts_per_step x max(1, max_trajectory_age_steps) x 2.",
    )
    in_flight_weight_updates: bool = Field(
        False,
        description="Swap new weights into the generator between decode chunks instead of at a group "
        "boundary (long generations do not hold up the update). The KV cache is kept across a swap, and each "
        "token's recorded log-prob is the one it was sampled with.",
    )
    in_flight_chunk_tokens: int = Field(
        8,
        ge=1,
        le=MAX_TOKENS,
        description="With in_flight_weight_updates: decode steps between weight checks (smaller = "
        "newer weights sooner, more host round trips).",
    )
    importance_sampling: ImportanceSamplingSection = Field(default_factory=ImportanceSamplingSection)


MOVED_TO_MESH = ("train_devices", "rollout_devices")
"""async.* fields that now live in the mesh section (mesh.train_devices, mesh.rollout_devices)."""

MAX_AXIS_SIZE = MAX_DEVICE_INDEX + 1


class MeshSection(_Section):
    """How a run's devices are arranged: the train mesh's named axes data x fsdp x tensor, and which
    devices train and which generate. All 1 (the default) = one device, no mesh."""

    data: int = Field(
        1,
        ge=-1,
        le=MAX_AXIS_SIZE,
        description="Data-parallel size: each device of this axis "
        "trains its own slice of every micro-batch with a full copy of the parameters (-1 = the "
        "rest of the devices).",
    )
    fsdp: int = Field(
        1,
        ge=-1,
        le=MAX_AXIS_SIZE,
        description="Fully sharded data-parallel size: parameters, "
        "gradients and optimizer state are split over this axis, and so is every micro-batch "
        "(-1 = the rest of the devices).",
    )
    tensor: int = Field(
        1,
        ge=-1,
        le=MAX_AXIS_SIZE,
        description="Tensor-parallel size: attention is split by "
        "heads, the MLP by its width and the LM head by the vocabulary (-1 = the rest of the "
        "devices). Heads, KV heads, MLP width and vocabulary must divide by it.",
    )
    train_devices: DeviceList = Field(
        default_factory=list,
        description="Device indices the train mesh uses, e.g. [0, 1, 2, 3]; empty = the "
        "first data x fsdp x tensor devices not in mesh.rollout_devices.",
    )
    rollout_devices: DeviceList = Field(
        default_factory=list,
        description="Device indices for generation (asynchronous GRPO), e.g. [4, 5]; "
        "empty = generation runs on the train mesh. Must not overlap mesh.train_devices.",
    )
    rollout_tensor: int = Field(
        1,
        ge=1,
        le=MAX_AXIS_SIZE,
        description="Tensor-parallel size of the rollout "
        "mesh (mesh.rollout_devices); the rest of its devices split the sequences.",
    )


class ClusterSection(_Section):
    """Where a run's processes run: one process per host, launched by the platform through Ray (or by
    `srun` / `mpirun` from the CLI). 1 host (the default) = today's single process, no Ray."""

    hosts: int = Field(
        1,
        ge=1,
        le=MAX_HOSTS,
        description="Hosts (processes) the run spans: the platform reserves "
        "one Ray placement-group bundle per host and starts one trainer process on each; they form "
        "one run whose mesh spans all their devices. 1 = one process on the worker itself.",
    )
    devices_per_host: int | None = Field(
        None,
        ge=1,
        le=MAX_AXIS_SIZE,
        description="Accelerators each host gives the run (GPUs reserved per Ray "
        "bundle; on CPU, the number of CPU devices each process makes); empty = whatever each host has. "
        "cluster.hosts x this must equal the mesh's devices.",
    )


class OptimizerSection(_Section):
    name: Literal[OPTIMIZERS.names()] = Field("adamw", description="Optax optimizer.")
    learning_rate: float = Field(1e-3, gt=0.0, description="Peak learning rate.")
    schedule: Literal[SCHEDULES.names()] = Field(
        "constant", description="Learning-rate shape after warmup (decays to 0 at train.max_steps)."
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        le=MAX_STEPS,
        description="Linear warmup length in steps (the first update "
        "already gets 1/(warmup updates) of the peak rate).",
    )
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay (adamw).")
    b1: float = Field(0.9, ge=0.0, lt=1.0, description="Adam beta1 (sgd: momentum, 0 = none).")
    b2: float = Field(0.999, ge=0.0, lt=1.0, description="Adam beta2.")
    max_grad_norm: float = Field(1.0, ge=0.0, description="Clip gradients to this global norm (0 = off).")


class TrainSection(_Section):
    max_steps: int = Field(100, ge=1, le=MAX_STEPS, description="Steps to run.")
    samples_per_step: int = Field(4, ge=0, le=1_024, description="Rollout samples reported per step.")
    system_metrics_every_s: float = Field(
        10.0,
        ge=0.0,
        le=86_400.0,
        description="Report system metrics (system/: CPU, host and accelerator "
        "memory, GPU utilisation) with a step at most this often, in seconds (0 = every step).",
    )


class CheckpointSection(_Section):
    every_steps: int = Field(50, ge=0, le=MAX_STEPS, description="Checkpoint period in steps (0 = only at the end).")
    keep_last: int = Field(3, ge=1, le=1_000, description="Keep this many newest checkpoints.")
    keep_best_metric: str | None = Field(None, description="Also keep the best checkpoint by this metric.")
    keep_best_mode: Literal["max", "min"] = Field("max", description="Whether larger or smaller is better.")


class EvalSection(_Section):
    every_steps: int = Field(0, ge=0, le=MAX_STEPS, description="Evaluate every N steps (0 = off).")
    before_training: bool = Field(
        False,
        description="Also evaluate the starting policy before the first step, reported as step 0 "
        "(with eval.every_steps > 0): the baseline the run's gain is measured against.",
    )
    prompts: int = Field(0, ge=0, le=MAX_DATASET_PROMPTS, description="Eval prompts per evaluation (0 = all).")
    temperature: float = Field(0.0, ge=0.0, description="Eval sampling temperature (0 = greedy) of eval/accuracy.")
    samples_per_prompt: int = Field(
        1,
        ge=1,
        le=MAX_GENERATIONS,
        description="n > 1: also sample n completions per eval prompt at "
        "rollout.temperature and report eval/pass@1 and eval/pass@k (k = eval.pass_k) from them, with the "
        "unbiased estimator 1 - C(n-c, k) / C(n, k) per prompt (c correct of n).",
    )
    pass_k: int | None = Field(
        None,
        ge=1,
        le=MAX_GENERATIONS,
        description="The k of eval/pass@k (at most eval.samples_per_prompt); null = eval.samples_per_prompt.",
    )


class EnvSection(_Section):
    """The environment a rollout's episodes run in (`trainers.envs`): single_turn is one prompt and one
    completion; a multi-turn environment answers each assistant turn (a tool's result, a game's move)
    until it says the episode is done."""

    name: str = Field(
        "single_turn",
        min_length=1,
        max_length=200,
        description="single_turn (one completion per prompt: the default), calculator (the model may call a "
        "calculator tool in <tool_call> tags), guess_number (a higher/lower guessing game over several turns), "
        "or your own environment as a dotted path package.module:Class.",
    )
    max_turns: int = Field(
        4,
        ge=1,
        le=MAX_ENV_TURNS,
        description="Most assistant turns in one episode; an episode that reaches it "
        "ends with the reason max_turns (multi-turn environments only).",
    )
    max_total_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Tokens an episode holds after its prompt: the model's turns and "
        "the environment's replies together (its completion budget); the episode ends with the reason "
        "max_total_tokens when the next reply would not fit. null = rollout.max_new_tokens (or the task's).",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The environment's own settings, checked against its settings "
        "schema (calculator: max_expression_chars, max_result_digits; guess_number: low, high).",
    )


class ExperimentConfig(_Section):
    """A whole GRPO experiment. See each section's fields for meaning and units."""

    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="The one seed every random choice derives from (0 to 2**32 - 1)."
    )
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    rewards: list[RewardSpec] = Field(
        default_factory=list, max_length=64, description="Rewards and weights; empty = the built-in task's own rewards."
    )
    judge: JudgeSection = Field(default_factory=JudgeSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    batch: BatchSection = Field(default_factory=BatchSection)
    grpo: GrpoSection = Field(default_factory=GrpoSection)
    async_: AsyncSection = Field(default_factory=AsyncSection, alias="async")
    mesh: MeshSection = Field(default_factory=MeshSection)
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection)
    train: TrainSection = Field(default_factory=TrainSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    env: EnvSection = Field(default_factory=EnvSection)

    @model_validator(mode="before")
    @classmethod
    def _async_devices_moved(cls, data: Any) -> Any:
        """async.train_devices / async.rollout_devices moved to the mesh section. An empty list (every
        config stored before the move has one) is dropped; a listed device is left for
        `parse_config` to refuse, naming the field's new place."""
        if isinstance(data, dict) and isinstance(data.get("async"), dict):
            section = dict(data["async"])
            for name in MOVED_TO_MESH:
                if name in section and (section[name] is None or parse_device_list(section[name]) == []):
                    del section[name]
            data = {**data, "async": section}
        return data

    def reward_specs(self) -> list[tuple[str, float]]:
        """(name, weight) of the rewards a run scores: the configured ones, or the built-in task's own
        when none are named."""
        if self.rewards:
            return [(r.name, r.weight) for r in self.rewards]
        return list(TASKS[self.data.task].default_rewards)

    def lists_reward(self, name: str) -> bool:
        """Whether `rewards` names the reward `name` (a task's own rewards, used when it is empty, never
        include a model-scored one such as the judge)."""
        return any(spec.name == name for spec in self.rewards)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict with YAML key names ("async", not "async_")."""
        return self.model_dump(mode="json", by_alias=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)
