"""The memory one training step needs, estimated before the run starts from its batch plan and its
model shape: `python -m trainers validate` prints it, and the platform refuses a run whose estimate
is above a worker's memory. JAX-free and cheap. It is an estimate of the process's host memory on a
CPU (XLA fuses, reuses and sometimes copies buffers): the right order of magnitude, on the high side.

Held for the whole run (float32, whatever `model.dtype`; P = parameters, T = trained parameters:
P, or with model.lora the adapters' rank x (in + out) per targeted projection, and P + T held):
  parameters        4 P bytes
  optimizer state   4 T per moment: adam / adamw 2, sgd with momentum (b1 > 0) 1, plain sgd 0
  reference model   4 T when grpo.beta > 0 (a copy of the initial weights; with LoRA the adapters
                    off over the shared base)
  collector weights 4 P with async.enabled (the collector generates with its own copy)
  step arrays       the step's rollout on the host, for every sequence of the step: prompt tokens and
                    valid flags (5 bytes a token), completion tokens, mask, generator / old /
                    reference log-probs and loss weights (25 bytes a token)
  runtime           RUNTIME_BYTES: the Python process, JAX / XLA and the compiled programs

The phases of a step run one after another, so the peak adds the largest of them (with
async.enabled the collector generates while the trainer trains: rollout adds to the largest other):
  rollout   one rollout micro-batch of B sequences: its KV cache (2 x layers x B x KV heads x head
            dim x (prompt + completion budget), in the compute dtype), the prefill of its distinct
            prompts (one layer live) and the sampler's SAMPLER_BUFFERS [B, V] buffers
  log-prob  one log-prob micro-batch's forward (only when the plan has log-prob passes): one layer
            live for every position, and the LM head's chunk
  update    one train micro-batch: gradients (4 T; 8 T with accumulation, the running sum and the
            micro-batch's own), the values every layer keeps for the backward pass at every
            position, and the LM head's chunk

A position is one token of a sequence laid out whole (prompt budget + completion budget, S tokens):
a step whose groups were reordered runs whole sequences (`plan.shared_prompt_group`), which is the
larger program. What a layer keeps per position (`layer_elements`), fitted to XLA:CPU's compiled
update (`memory_analysis()` of SmolLM2-135M's update at 24 sequences of 64 + 48 and 128 + 48 tokens:
59.5 and 67.6 KB a position and layer, against 61.4 and 70.7 here): the residual stream, the two norms'
inputs and outputs and the mid-block residual (5 H), q, k, v before and after RoPE and the attention
output (3 NH D + 3 KVH D), the MLP's gate, up, silu(gate) and down input (4 M), and
ATTENTION_BUFFERS [NH, S] rows of scores and probabilities. Everything but the KV cache is counted in
float32: XLA:CPU keeps bfloat16 compute's activations at float32 size (the README's update memory is
the same in both), and `model.remat` saves almost nothing there.
The LM head goes through `LOGITS_CHUNK_ELEMENTS` float32 logits at a time (`transformer`), with
LOGITS_BUFFERS such buffers alive in the backward pass.
"""

from __future__ import annotations

import dataclasses

from trainers.config import ExperimentConfig
from trainers.config.schema import OptimizerSection
from trainers.loop.plan import BatchPlan
from trainers.models.hf_config import parameter_count
from trainers.models.presets import LOGITS_CHUNK_ELEMENTS, ModelConfig

GIB = 1024 ** 3
FLOAT32_BYTES = 4
RUNTIME_BYTES = 1 * GIB
"""The Python process with JAX and XLA loaded, the dataset and tokenizer, and the compiled programs:
a tiny-preset run peaks at about 0.6 GiB of RSS on this project's CPU machine."""
PROMPT_BYTES_PER_TOKEN = 5          # int32 token + bool valid
COMPLETION_BYTES_PER_TOKEN = 25     # int32 token + bool mask + 5 float32 (generator, old, reference log-probs, weights)
SAMPLER_BUFFERS = 5                 # [B, V] float32: logits, filtered, log-probs, probs, cdf
LOGITS_BUFFERS = 4                  # [chunk, V] float32: logits, probs; the backward's recomputed logits and their gradient
ATTENTION_BUFFERS = 4               # [NH, S] float32 per position and layer (XLA:CPU keeps about 3.5)


@dataclasses.dataclass(frozen=True)
class MemoryPart:
    """One part of the estimate: `name`, its size and the config fields that make it smaller."""

    name: str
    bytes: int
    lower: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """The estimate: `held` parts last the whole run; of `phases` (rollout, log-prob, update) the
    largest adds to them, or with `concurrent_rollout` (async) the rollout plus the largest other."""

    held: tuple[MemoryPart, ...]
    phases: tuple[MemoryPart, ...]
    concurrent_rollout: bool = False

    @property
    def peak_phases(self) -> tuple[MemoryPart, ...]:
        """The phases alive at the step's peak."""
        rollout = [p for p in self.phases if p.name == "rollout"]
        others = [p for p in self.phases if p.name != "rollout"]
        if self.concurrent_rollout and rollout and others:
            return (rollout[0], max(others, key=lambda p: p.bytes))
        return (max(self.phases, key=lambda p: p.bytes),)

    @property
    def total_bytes(self) -> int:
        return sum(p.bytes for p in self.held) + sum(p.bytes for p in self.peak_phases)

    def largest_parts(self) -> tuple[MemoryPart, ...]:
        """The parts at the peak, largest first."""
        return tuple(sorted(self.held + self.peak_phases, key=lambda p: -p.bytes))

    def fields_to_lower(self, count: int = 2) -> tuple[str, ...]:
        """The config fields of the `count` largest parts at the peak, each once, in that order."""
        fields: list[str] = []
        for part in self.largest_parts()[:count]:
            fields += [f for f in part.lower if f not in fields]
        return tuple(fields)

    def describe(self) -> str:
        """Lines for `validate` and the plan preview: the total, then every part in GiB."""
        at_peak = {p.name for p in self.peak_phases}
        lines = [f"Memory of a step (estimate)     {gib(self.total_bytes)} GiB"]
        for part in self.held:
            lines.append(f"  {part.name:<30}{gib(part.bytes)} GiB")
        for part in self.phases:
            note = "" if part.name in at_peak else "  (not at the peak)"
            lines.append(f"  {part.name + ' phase':<30}{gib(part.bytes)} GiB{note}")
        return "\n".join(lines)


def gib(size_bytes: int) -> str:
    """Bytes as GiB with two decimals ("4.24")."""
    value = size_bytes / GIB
    return f"{value:.2f}"


def optimizer_moments(optimizer: OptimizerSection) -> int:
    """float32 buffers per parameter the optimizer keeps: Adam's two moments, SGD's momentum."""
    if optimizer.name in ("adam", "adamw"):
        return 2
    return 1 if optimizer.b1 > 0 else 0


def layer_elements(model: ModelConfig, sequence_tokens: int) -> int:
    """float32 values one layer keeps per position for the backward pass, in a sequence of
    `sequence_tokens` (see the module docstring)."""
    m = model
    return (5 * m.hidden_size + 3 * (m.num_heads + m.num_kv_heads) * m.head_dim + 4 * m.mlp_size
            + ATTENTION_BUFFERS * m.num_heads * sequence_tokens)


def logits_chunk_bytes(model: ModelConfig, positions: int, chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> int:
    """The LM head's live buffers for `positions` positions taken in chunks (`transformer`)."""
    chunk_positions = max(1, min(positions, chunk_elements // model.vocab_size))
    return LOGITS_BUFFERS * chunk_positions * model.vocab_size * FLOAT32_BYTES


def estimate_step_memory(plan: BatchPlan, model: ModelConfig, moments: int, concurrent_rollout: bool = False,
                         chunk_elements: int = LOGITS_CHUNK_ELEMENTS, adapter_parameters: int = 0) -> StepMemory:
    """The estimate for `plan` on `model` with an optimizer of `moments` float32 buffers per
    parameter; `concurrent_rollout`: async.enabled; `adapter_parameters`: the LoRA adapters' size
    (0: full fine-tuning). See the module docstring for every part."""
    params_bytes = (parameter_count(model) + adapter_parameters) * FLOAT32_BYTES
    trained_bytes = adapter_parameters * FLOAT32_BYTES if adapter_parameters else params_bytes
    lp, lc = plan.prompt_token_budget, plan.completion_token_budget
    seq = lp + lc
    held = [
        MemoryPart("parameters", params_bytes, ("model.preset / model.path (a smaller model)",)),
        MemoryPart("optimizer state", moments * trained_bytes, ("optimizer.name", "model.lora.rank")),
    ]
    if plan.needs_reference:
        held.append(MemoryPart("reference model", trained_bytes, ("grpo.beta (0: no reference model)",)))
    if concurrent_rollout:
        held.append(MemoryPart("collector weights", params_bytes, ("async.enabled",)))
    held += [
        MemoryPart("step arrays", plan.sequences_per_step * (lp * PROMPT_BYTES_PER_TOKEN
                                                             + lc * COMPLETION_BYTES_PER_TOKEN),
                   ("batch.prompts_per_step", "grpo.num_generations", "rollout.max_new_tokens")),
        MemoryPart("runtime", RUNTIME_BYTES, ()),
    ]
    lengths = ("rollout.max_new_tokens", "data.max_prompt_tokens")

    rows = plan.rollout_micro_batch_sequences
    distinct_prompts = rows // plan.num_generations if rows % plan.num_generations == 0 else rows  # generate's prompt_group
    kv_cache = 2 * model.num_layers * rows * model.num_kv_heads * model.head_dim * seq * (
        2 if model.dtype == "bfloat16" else FLOAT32_BYTES)
    prefill = distinct_prompts * lp * layer_elements(model, lp) * FLOAT32_BYTES
    sampler = SAMPLER_BUFFERS * rows * model.vocab_size * FLOAT32_BYTES
    phases = [MemoryPart("rollout", kv_cache + prefill + sampler, ("batch.rollout_micro_batch_sequences",) + lengths)]

    if plan.needs_old_logprobs or plan.needs_reference:
        positions = plan.logprob_micro_batch_sequences * seq
        forward = positions * layer_elements(model, seq) * FLOAT32_BYTES
        phases.append(MemoryPart("log-prob", forward + logits_chunk_bytes(model, positions, chunk_elements),
                                 ("batch.logprob_micro_batch_sequences",) + lengths))

    positions = plan.train_micro_batch_sequences * seq
    gradients = trained_bytes * (2 if plan.accumulation_steps > 1 else 1)
    activations = positions * model.num_layers * layer_elements(model, seq) * FLOAT32_BYTES
    phases.append(MemoryPart("update", gradients + activations + logits_chunk_bytes(model, positions, chunk_elements),
                             ("batch.train_micro_batch_sequences",) + lengths))
    return StepMemory(tuple(held), tuple(phases), concurrent_rollout)


def step_memory(config: ExperimentConfig, plan: BatchPlan) -> StepMemory:
    """The estimate for a validated config and its plan; the model shape comes from model.path's
    config.json or the preset (`policy.model_config_for`: raises ModelFolderError for a bad folder)."""
    from trainers.loop.policy import model_config_for
    from trainers.models.lora_targets import targeted

    model = model_config_for(config)
    lora = config.model.lora
    adapters = sum(lora.rank * (fan_in + fan_out) for fan_in, fan_out in
                   targeted(model, lora.target_modules).values()) if lora.rank else 0
    return estimate_step_memory(plan, model, optimizer_moments(config.optimizer),
                                concurrent_rollout=config.async_.enabled, adapter_parameters=adapters)


