"""The memory one training step needs, estimated before the run starts from its batch plan and its
model shape: `python -m trainers validate` prints it, and the platform refuses a run whose estimate
is above a worker's memory. JAX-free and cheap. It is an estimate of the process's peak host memory
on a CPU (XLA fuses, reuses and sometimes copies buffers), kept within 1.0-1.3x of the peak RSS
measured on the demo, W1, SmolLM2 and R1 configs (`bench/memory_estimate.py` measures them,
`docs/perf/memory-peaks.json` keeps the figures, `tests/trainers/loop/test_memory_estimate.py` checks the ratio).

Held for the whole run (float32, whatever `model.dtype`; P = parameters, T = trained parameters:
P, or with model.lora the adapters' rank x (in + out) per targeted projection, and P + T held):
  parameters        4 P bytes
  optimizer state   4 T per moment: adam / adamw 2, sgd with momentum (b1 > 0) 1, plain sgd 0
  reference model   4 T when grpo.beta > 0 (a copy of the initial weights; with LoRA the adapters
                    off over the shared base)
  collector weights 4 P with async.enabled (the collector generates with its own copy)
  judge model       with the judge reward: its parameters, 4 bytes each (2 with judge.dtype bfloat16:
                    its matrices are kept in it); its passes' activations are not counted
  step arrays       the step's rollout on the host, for every sequence of the step: prompt tokens and
                    valid flags (5 bytes a token), completion tokens, mask, generator / old /
                    reference log-probs and loss weights (25 bytes a token)
  runtime           RUNTIME_BYTES (the Python process with JAX and XLA loaded, the dataset and the
                    tokenizer: a tiny preset's run peaks at 0.69 GiB) and 4 P more, fitted: the
                    compiler's own memory, the compiled programs and what a step fetches to the host
                    grow with the model

Then every phase of a step, added together: a phase's buffers stay with the process when it ends
(the allocator keeps freed memory for the next one). Measured: held parts + a tiny run's 0.64 GiB +
all three phases (the update at its compiled size) come within 0.15 GiB of the peak RSS of W1, the
SmolLM2 demo and R1, where the largest phase alone left up to 0.55 GiB unexplained:
  rollout   the engine's B decode slots (rollout.decode_slots, default the rollout micro-batch; on
            an accelerator that default grows into half the free memory at generation time, which
            this estimate leaves out: it is memory the step does not otherwise use):
            its page pool (2 x layers x B x KV heads x head dim x (prompt + completion budget,
            rounded up to whole pages), in the compute dtype), the dense view a CPU's decode chunk
            gathers from it (the same per slot, plus a chunk's positions), the prefill of B / G
            distinct prompts (one layer live; of rollout.prefill_chunk_tokens positions each when
            the prompts are longer, a piece at a time) and the sampler's SAMPLER_BUFFERS [B, V] buffers
  log-prob  one log-prob micro-batch's forward (only when the plan has log-prob passes): one layer
            live, and the LM head's chunk; with batch.logprob_micro_batch_tokens, the larger of that
            micro-batch and a packed one of that many positions
  update    one train micro-batch: gradients (4 T; 8 T with accumulation, the running sum and the
            micro-batch's own), the values every layer keeps for the backward pass, and the LM
            head's chunk; with batch.train_micro_batch_tokens, the larger of that micro-batch and
            a packed one of that many positions

The prompt width is the data's longest prompt rounded up to its bucket (`encoding.bucket_width`),
what the trainer pads a step's prompts to, when the caller knows it (`validate` encodes every
prompt); otherwise data.max_prompt_tokens, an upper bound for any data (the platform's check).
The completion width is the completion budget: a step may use all of it.

A micro-batch of whole groups of G (train / log-prob micro-batch sequences a multiple of G) runs
each group's prompt once and its G completions over it (`plan.shared_prompt_group`,
`forward_elements`); otherwise every sequence runs whole. What a layer keeps per position
(`layer_elements`), fitted to XLA:CPU's compiled update (`memory_analysis()` of SmolLM2-135M's
update at 24 sequences of 64 + 48 and 128 + 48 tokens: 59.5 and 67.6 KB a position and layer,
against 61.4 and 70.7 here; R1's update, 32 sequences sharing prompts per group of 4, 4.50 GiB
compiled against 4.71 here): the residual stream, the two norms' inputs and outputs and the
mid-block residual (5 H), q, k, v before and after RoPE and the attention output (3 NH D + 3 KVH
D), the MLP's gate, up, silu(gate) and down input (4 M), and ATTENTION_BUFFERS [NH, S] rows of
scores and probabilities; over QUERY_CHUNK_TOKENS queries the attention runs in chunks recomputed in
the backward pass, so no scores are kept and one chunk's [NH, chunk, S] buffers are alive instead.
Everything but the KV cache is counted in float32: XLA:CPU keeps bfloat16
compute's activations at float32 size (the README's update memory is the same in both).
With remat (`model.remat`, or null and the estimate without it over the memory the run has:
`step_memory`) the blocks run as a scan whose body is recomputed in the backward pass: every layer
keeps REMAT_KEPT per position (its input, and the keys and values the scan returns), one layer's
values are alive while it is recomputed, and the scan holds the blocks' weights stacked and their
gradients stacked besides (fitted to the compiled update of 1 prompt x G 4 on SmolLM2-135M: 2.28
and 5.17 GiB of temporaries at 1,024 and 4,096 completion tokens, against 2.29 and 5.04 here).
The LM head goes through `LOGITS_CHUNK_ELEMENTS` float32 logits at a time (`transformer`), with
LOGITS_BUFFERS such buffers alive in the backward pass.
"""

from __future__ import annotations

import dataclasses

from trainers.config import ExperimentConfig
from trainers.config.schema import OptimizerSection
from trainers.data.encoding import bucket_width, prompt_bucket_tokens
from trainers.engine.pages import PAGE_TOKENS, decode_slot_count
from trainers.loop.policy import model_config_for
from trainers.models.hf_config import parameter_count, read_model_config
from trainers.models.lora_targets import targeted
from trainers.models.presets import LOGITS_CHUNK_ELEMENTS, QUERY_CHUNK_TOKENS, ModelConfig, query_chunk_tokens
from trainers.step.plan import BatchPlan, make_plan

GIB = 1024**3
FLOAT32_BYTES = 4
RUNTIME_BYTES = 800 * 1024**2
"""The Python process with JAX and XLA loaded, the dataset and the tokenizer: a tiny-preset run (the
demo) peaks at 0.68 GiB of RSS on this project's CPU machine; the runtime part adds one parameters'
size to it (see the module docstring)."""
PROMPT_BYTES_PER_TOKEN = 5  # int32 token + bool valid
COMPLETION_BYTES_PER_TOKEN = 25  # int32 token + bool mask + 5 float32 (generator, old, reference log-probs, weights)
SAMPLER_BUFFERS = 5  # [B, V] float32: logits, filtered, log-probs, probs, cdf
LOGITS_BUFFERS = 4  # [chunk, V] float32: logits, probs; the backward's recomputed logits and their gradient
ATTENTION_BUFFERS = 4  # [NH, S] float32 per position and layer (XLA:CPU keeps about 3.5)
FIT_FRACTION = 0.85
"""The share of the memory a run has that its null fields are chosen to fit in (`fit_step`): room
for what the estimate leaves out (other processes, the allocator's slack)."""
STACKED_BLOCK_COPIES = 2  # under remat's scan: the blocks' weights stacked [L, ...] and their gradients


@dataclasses.dataclass(frozen=True)
class MemoryPart:
    """One part of the estimate: `name`, its size and the config fields that make it smaller."""

    name: str
    bytes: int
    lower: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """The estimate: `held` parts last the whole run and the `phases` (rollout, log-prob, update) add
    to them, each kept by the process once it has run. `prompt_tokens`: the prompt width it counts,
    the data's longest prompt bucketed (`from_data`) or data.max_prompt_tokens."""

    held: tuple[MemoryPart, ...]
    phases: tuple[MemoryPart, ...]
    prompt_tokens: int = 0
    from_data: bool = False
    remat: bool = False
    automatic: tuple[str, ...] = ()
    """What the run chose for null fields to fit its memory (`fit_step`), one line each."""

    @property
    def total_bytes(self) -> int:
        return sum(p.bytes for p in self.held + self.phases)

    def largest_parts(self) -> tuple[MemoryPart, ...]:
        """Every part, largest first."""
        return tuple(sorted(self.held + self.phases, key=lambda p: -p.bytes))

    def fields_to_lower(self, count: int = 2) -> tuple[str, ...]:
        """The config fields of the `count` largest parts at the peak, each once, in that order."""
        fields: list[str] = []
        for part in self.largest_parts()[:count]:
            fields += [f for f in part.lower if f not in fields]
        return tuple(fields)

    def describe(self) -> str:
        """Lines for `validate` and the plan preview: the total and the prompt width it counts, then
        every part in GiB."""
        width = "the data's longest prompt, bucketed" if self.from_data else "data.max_prompt_tokens"
        lines = [
            f"Memory of a step (estimate)     {gib(self.total_bytes)} GiB  "
            f"(prompts of {self.prompt_tokens} tokens: {width})"
        ]
        for line in self.automatic:
            lines.append(f"  {'chosen to fit the memory':<30}{line}")
        if self.remat and not any(line.startswith("remat") for line in self.automatic):
            lines.append(f"  {'remat':<30}on (model.remat)")
        for part in self.held:
            lines.append(f"  {part.name:<30}{gib(part.bytes)} GiB")
        for part in self.phases:
            lines.append(f"  {part.name + ' phase':<30}{gib(part.bytes)} GiB")
        return "\n".join(lines)


def memory_refusal(memory: StepMemory, available_bytes: int, whose: str, source: str = "") -> str | None:
    """Why a step estimated at `memory` does not fit in `available_bytes`, or None. The message
    names that memory by `whose` ("a worker's", "this machine's") and `source` (where the figure
    comes from, in brackets after it)."""
    if memory.total_bytes <= available_bytes:
        return None
    parts = ", ".join(f"{p.name} {gib(p.bytes)} GiB" for p in memory.largest_parts()[:3])
    return (
        f"memory: a step needs about {gib(memory.total_bytes)} GiB (estimate; largest parts: {parts}), "
        f"more than {whose} {gib(available_bytes)} GiB{f' ({source})' if source else ''}; "
        f"lower {', '.join(memory.fields_to_lower())}"
        + ("" if memory.remat else ", or set model.remat true (about a third more compute in the update)")
    )


def gib(size_bytes: int) -> str:
    """Bytes as GiB with two decimals ("4.24")."""
    value = size_bytes / GIB
    return f"{value:.2f}"


def optimizer_moments(optimizer: OptimizerSection) -> int:
    """float32 buffers per parameter the optimizer keeps: Adam's two moments, SGD's momentum."""
    if optimizer.name in ("adam", "adamw"):
        return 2
    return 1 if optimizer.b1 > 0 else 0


def remat_kept_elements(model: ModelConfig) -> int:
    """float32 values every layer keeps per position under remat: the layer's input and the keys
    and values the scan returns (fitted; see the module docstring)."""
    return model.hidden_size + 2 * model.num_kv_heads * model.head_dim


def layer_elements(model: ModelConfig, sequence_tokens: int, query_tokens: int | None = None) -> int:
    """float32 values one layer keeps per position for the backward pass, in a sequence of
    `sequence_tokens` keys and `query_tokens` queries (None: as many; see the module docstring).
    Over QUERY_CHUNK_TOKENS queries the attention runs in chunks recomputed in the backward pass,
    so no scores are kept (`attention_chunk_bytes` counts the one chunk alive)."""
    m = model
    queries = sequence_tokens if query_tokens is None else query_tokens
    scores = ATTENTION_BUFFERS * m.num_heads * sequence_tokens if queries <= QUERY_CHUNK_TOKENS else 0
    return 5 * m.hidden_size + 3 * (m.num_heads + m.num_kv_heads) * m.head_dim + 4 * m.mlp_size + scores


def forward_elements(model: ModelConfig, rows: int, group: int, prompt_tokens: int, completion_tokens: int) -> int:
    """float32 values one layer keeps for the backward pass over `rows` sequences of `prompt_tokens` +
    `completion_tokens` positions. group = G > 1 when the rows come as whole groups of G sharing a
    prompt (`plan.shared_prompt_group`): each prompt then runs once (attending over itself) and the
    G completions attend over it and themselves, holding the prompt's keys and values repeated G
    times (`transformer._grouped_hidden`); otherwise every row runs whole."""
    m, lp, lc = model, prompt_tokens, completion_tokens
    if group <= 1 or rows % group:
        return rows * (lp + lc) * layer_elements(m, lp + lc)
    repeated_kv = rows * lp * 2 * m.num_kv_heads * m.head_dim
    return rows // group * lp * layer_elements(m, lp) + rows * lc * layer_elements(m, lp + lc, lc) + repeated_kv


def forward_positions(rows: int, group: int, prompt_tokens: int, completion_tokens: int) -> int:
    """The positions a pass runs over `rows` sequences: each prompt once per group of G sharing it
    (as `forward_elements` counts them), otherwise every row whole."""
    if group <= 1 or rows % group:
        return rows * (prompt_tokens + completion_tokens)
    return rows // group * prompt_tokens + rows * completion_tokens


def attention_chunk_bytes(model: ModelConfig, rows: int, group: int, prompt_tokens: int, completion_tokens: int) -> int:
    """The scores alive while one chunk of queries attends (forward or its recomputation in the
    backward pass; `query_chunk_tokens` queries), for a pass whose query spans are longer than
    QUERY_CHUNK_TOKENS; 0 otherwise."""
    m, lp, lc = model, prompt_tokens, completion_tokens
    queries = lc if group > 1 and rows % group == 0 else lp + lc
    if queries <= QUERY_CHUNK_TOKENS:
        return 0
    chunk = query_chunk_tokens(rows, m.num_heads, lp + lc)
    return ATTENTION_BUFFERS * m.num_heads * rows * chunk * (lp + lc) * FLOAT32_BYTES


def block_parameter_count(model: ModelConfig) -> int:
    """The parameters of the transformer blocks (all but the embedding, the final norm and an untied LM head)."""
    head = 0 if model.tie_embeddings else model.hidden_size * model.vocab_size
    return parameter_count(model) - model.vocab_size * model.hidden_size - model.hidden_size - head


def logits_chunk_bytes(model: ModelConfig, positions: int, chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> int:
    """The LM head's live buffers for `positions` positions taken in chunks (`transformer`)."""
    chunk_positions = max(1, min(positions, chunk_elements // model.vocab_size))
    return LOGITS_BUFFERS * chunk_positions * model.vocab_size * FLOAT32_BYTES


def estimate_step_memory(
    plan: BatchPlan,
    model: ModelConfig,
    moments: int,
    concurrent_rollout: bool = False,
    chunk_elements: int = LOGITS_CHUNK_ELEMENTS,
    adapter_parameters: int = 0,
    prompt_tokens: int | None = None,
    decode_slots: int | None = None,
    decode_chunk_tokens: int = 16,
    prefill_chunk_tokens: int = 0,
    judge_bytes: int = 0,
) -> StepMemory:
    """The estimate for `plan` on `model` with an optimizer of `moments` float32 buffers per
    parameter; `concurrent_rollout`: async.enabled (the collector's own weights); `adapter_parameters`:
    the LoRA adapters' size (0: full fine-tuning); `prompt_tokens`: the width a step's prompts are
    padded to (None: the plan's prompt budget; never more); `decode_slots`, `decode_chunk_tokens`,
    `prefill_chunk_tokens`: the engine's (None: the rollout micro-batch; 0: prompts prefilled whole);
    `judge_bytes`: the judge model's weights (`judge_weight_bytes`; 0: no judge).
    See the module docstring for every part."""
    params_bytes = (parameter_count(model) + adapter_parameters) * FLOAT32_BYTES
    trained_bytes = adapter_parameters * FLOAT32_BYTES if adapter_parameters else params_bytes
    lc = plan.completion_token_budget
    lp = plan.prompt_token_budget if prompt_tokens is None else min(prompt_tokens, plan.prompt_token_budget)
    seq = lp + lc
    held = [
        MemoryPart("parameters", params_bytes, ("model.preset / model.path (a smaller model)",)),
        MemoryPart("optimizer state", moments * trained_bytes, ("optimizer.name", "model.lora.rank")),
    ]
    if plan.needs_reference:
        held.append(MemoryPart("reference model", trained_bytes, ("grpo.beta (0: no reference model)",)))
    if concurrent_rollout:
        held.append(MemoryPart("collector weights", params_bytes, ("async.enabled",)))
    if judge_bytes:
        held.append(MemoryPart("judge model", judge_bytes, ("judge.model_path (a smaller judge)", "judge.dtype")))
    held += [
        MemoryPart(
            "step arrays",
            plan.sequences_per_step * (lp * PROMPT_BYTES_PER_TOKEN + lc * COMPLETION_BYTES_PER_TOKEN),
            ("batch.prompts_per_step", "grpo.num_generations", "rollout.max_new_tokens"),
        ),
        MemoryPart("runtime", RUNTIME_BYTES + params_bytes, ()),
    ]
    lengths = ("rollout.max_new_tokens", "data.max_prompt_tokens")

    rows = decode_slot_count(
        decode_slots, plan.rollout_micro_batch_sequences, plan.sequences_per_step, plan.num_generations
    )
    distinct_prompts = max(rows // plan.num_generations, 1)  # the engine admits whole groups
    kv_position = (
        2
        * model.num_layers
        * rows
        * model.num_kv_heads
        * model.head_dim
        * (2 if model.dtype == "bfloat16" else FLOAT32_BYTES)
    )
    pages = kv_position * -(-seq // PAGE_TOKENS) * PAGE_TOKENS
    view = kv_position * (seq + decode_chunk_tokens)
    piece = min(lp, prefill_chunk_tokens) if prefill_chunk_tokens else lp  # a long prompt's prefill runs in pieces
    prefill = distinct_prompts * piece * layer_elements(model, lp) * FLOAT32_BYTES
    sampler = SAMPLER_BUFFERS * rows * model.vocab_size * FLOAT32_BYTES
    phases = [
        MemoryPart(
            "rollout",
            pages + view + prefill + sampler,
            ("rollout.decode_slots", "batch.rollout_micro_batch_sequences") + lengths,
        )
    ]

    g = plan.num_generations
    if plan.needs_old_logprobs or plan.needs_reference:
        rows = plan.logprob_micro_batch_sequences
        positions = rows * lc  # the LM head runs on completion positions only
        forward = forward_elements(model, rows, g, lp, lc) * FLOAT32_BYTES  # one layer live
        forward += attention_chunk_bytes(model, rows, g, lp, lc)
        budget = plan.packed_logprob_micro_batch_tokens
        if budget is not None:  # packed micro-batches of that many positions, in rows of at most lp + lc
            forward = max(forward, budget * layer_elements(model, lp + lc) * FLOAT32_BYTES)
            positions = max(positions, budget)
        if model.remat:  # the scan's stacked weights
            forward += block_parameter_count(model) * FLOAT32_BYTES
        phases.append(
            MemoryPart(
                "log-prob",
                forward + logits_chunk_bytes(model, positions, chunk_elements),
                ("batch.logprob_micro_batch_sequences",)
                + (("batch.logprob_micro_batch_tokens",) if budget is not None else ())
                + lengths,
            )
        )

    rows = plan.train_micro_batch_sequences
    positions = rows * lc
    gradients = trained_bytes * (2 if plan.accumulation_steps > 1 else 1)
    layer = forward_elements(model, rows, g, lp, lc)  # one layer's values over the micro-batch
    kept = model.num_layers * layer
    if model.remat:  # each layer's input kept, one layer's values alive while it is recomputed
        kept = model.num_layers * forward_positions(rows, g, lp, lc) * remat_kept_elements(model) + layer
    activations = kept * FLOAT32_BYTES + attention_chunk_bytes(model, rows, g, lp, lc)
    budget = plan.packed_micro_batch_tokens
    if budget is not None:  # packed micro-batches of that many positions, in rows of at most lp + lc
        per_position = layer_elements(model, lp + lc)
        kept = model.num_layers * (remat_kept_elements(model) if model.remat else per_position)
        packed = budget * (kept + (per_position if model.remat else 0)) * FLOAT32_BYTES
        activations = max(activations, packed)
        positions = max(positions, budget)
    if model.remat:
        activations += STACKED_BLOCK_COPIES * block_parameter_count(model) * FLOAT32_BYTES
    phases.append(
        MemoryPart(
            "update",
            gradients + activations + logits_chunk_bytes(model, positions, chunk_elements),
            ("batch.train_micro_batch_sequences",)
            + (("batch.train_micro_batch_tokens",) if budget is not None else ())
            + lengths,
        )
    )
    return StepMemory(tuple(held), tuple(phases), lp, prompt_tokens is not None, remat=model.remat)


def step_memory(
    config: ExperimentConfig,
    plan: BatchPlan,
    longest_prompt_tokens: int | None = None,
    available_bytes: int | None = None,
) -> StepMemory:
    """The estimate for a validated config and its plan; the model shape comes from model.path's
    config.json or the preset (`policy.model_config_for`: raises ModelFolderError for a bad folder).
    `longest_prompt_tokens`: the data's longest prompt as its episode starts (`prompt_fit`), rounded
    up to the run's bucket as the trainer pads it; None counts data.max_prompt_tokens.
    `available_bytes`: the memory the run has, for what a run chooses to fit in it (`fit_step`);
    None: nothing is chosen (a null model.remat is off)."""
    return fit_step(config, plan, available_bytes, longest_prompt_tokens).memory


@dataclasses.dataclass(frozen=True)
class FittedStep:
    """A run's step as it fits its memory (`fit_step`): the plan it trains with, whether the blocks
    are rematerialised, and the estimate of that step (its `automatic` lines say what was chosen)."""

    plan: BatchPlan
    memory: StepMemory

    @property
    def remat(self) -> bool:
        return self.memory.remat


def fit_step(
    config: ExperimentConfig, plan: BatchPlan, available_bytes: int | None, longest_prompt_tokens: int | None = None
) -> FittedStep:
    """What a run of `config` chooses for the fields it leaves null so that its step's estimate fits
    in FIT_FRACTION of `available_bytes` (None: nothing is chosen), cheapest first:
      - model.remat null: on when the step does not fit without it;
      - batch.train_micro_batch_sequences null (the whole mini-batch): then the largest divisor of the
        mini-batch that fits (whole groups of G first, split evenly over data x fsdp), never under
        one sequence per device.
    A step that fits as configured is left as it is; one that fits nowhere keeps the smallest choice
    (its estimate is what the memory check refuses)."""
    remat = bool(config.model.remat)
    memory = _config_estimate(config, plan, longest_prompt_tokens, remat)
    if available_bytes is None or memory.total_bytes <= available_bytes * FIT_FRACTION:
        return FittedStep(plan, memory)
    available_bytes = int(available_bytes * FIT_FRACTION)
    automatic: list[str] = []
    if config.model.remat is None:
        before, remat = memory.total_bytes, True
        memory = _config_estimate(config, plan, longest_prompt_tokens, remat)
        automatic.append(f"remat on (model.remat null: {gib(before)} GiB without it)")
    if memory.total_bytes > available_bytes and config.batch.train_micro_batch_sequences is None:
        before, whole = memory.total_bytes, plan.train_micro_batch_sequences
        for sequences in _smaller_micro_batches(plan):
            plan = make_plan(config, plan.dataset_prompts, sequences)
            memory = _config_estimate(config, plan, longest_prompt_tokens, remat)
            if memory.total_bytes <= available_bytes:
                break
        if plan.train_micro_batch_sequences != whole:
            automatic.append(
                f"train micro-batch {plan.train_micro_batch_sequences} sequences (batch.train_micro_batch_sequences "
                f"null: {gib(before)} GiB with the whole mini-batch of {whole})"
            )
    return FittedStep(plan, dataclasses.replace(memory, automatic=tuple(automatic)))


def _smaller_micro_batches(plan: BatchPlan) -> list[int]:
    """Train micro-batch sizes below the plan's, largest first: divisors of the mini-batch, split
    evenly over the devices (data x fsdp), whole groups of G before the others."""
    split = plan.batch_split or 1
    whole = plan.mini_batch_sequences
    sizes = [n for n in range(plan.train_micro_batch_sequences - 1, 0, -1) if whole % n == 0 and n % split == 0]
    g = plan.num_generations
    return [n for n in sizes if n % g == 0] + [n for n in sizes if n % g]


def _config_estimate(
    config: ExperimentConfig, plan: BatchPlan, longest_prompt_tokens: int | None, remat: bool
) -> StepMemory:
    model = model_config_for(config, remat)
    lora = config.model.lora
    adapters = (
        sum(lora.rank * (fan_in + fan_out) for fan_in, fan_out in targeted(model, lora.target_modules).values())
        if lora.rank
        else 0
    )
    width = (
        None
        if longest_prompt_tokens is None
        else bucket_width(longest_prompt_tokens, prompt_bucket_tokens(bool(config.model.path)))
    )
    return estimate_step_memory(
        plan,
        model,
        optimizer_moments(config.optimizer),
        concurrent_rollout=config.async_.enabled,
        adapter_parameters=adapters,
        prompt_tokens=width,
        decode_slots=config.rollout.decode_slots,
        decode_chunk_tokens=config.rollout.decode_chunk_tokens,
        prefill_chunk_tokens=config.rollout.prefill_chunk_tokens,
        judge_bytes=judge_weight_bytes(config),
    )


def judge_weight_bytes(config: ExperimentConfig) -> int:
    """The judge model's weights in bytes when the rewards list the judge (judge.model_path's
    config.json): 4 per parameter, 2 with judge.dtype bfloat16; 0 without a judge."""
    j = config.judge
    if j.model_path is None or not config.lists_reward("judge"):
        return 0
    return parameter_count(read_model_config(j.model_path)) * (2 if j.dtype == "bfloat16" else FLOAT32_BYTES)
