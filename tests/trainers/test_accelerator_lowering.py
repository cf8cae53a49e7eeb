"""The accelerator lane, without an accelerator: every device program the trainer runs is traced
and lowered (not compiled) for a GPU ("cuda") and a TPU ("tpu") on this CPU, at the SmolLM2-135M
and Qwen2-0.5B shapes in bfloat16, with the kernels each platform picks (`backend.lowering_for`):

  - the generation engine's programs (`engine.programs`): admit (prefill), prefill_piece (a
    chunked prefill), decode_chunk and admit_and_decode, each decode step attending as the engine
    picks (`batching.decode_attention`: the paged-attention Pallas kernel on a GPU; on a TPU the
    gathered view, since the TPU kernel takes no head of 64);
  - both log-prob passes, padded and packed (`update.make_logprob_fn`, `make_packed_logprob_fn`);
  - the optimizer update over padded and packed micro-batches (`update.make_update_fn`);
    packed rows hold one sequence per segment and attend in the platform's segment-id kernel
    (`segment_attention`: Triton flash attention on a GPU, splash attention on a TPU).

The functions are those `GRPOTrainer` builds (`update.training_functions`), from a parsed config,
over abstract inputs (`jax.ShapeDtypeStruct`; parameters from `jax.eval_shape`): no weights are
allocated. A shape a kernel refuses fails here, as it would on the device: Pallas checks block
shapes when it lowers. `test_kernel_fits` checks that `gpu_kernel_fits` / `tpu_kernel_fits` say
exactly which shapes the kernels lower.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.algo.optim import make_optimizer, make_schedule
from trainers.config import ExperimentConfig, parse_config
from trainers.engine import programs
from trainers.engine.batching import EngineSettings, decode_attention
from trainers.engine.pages import PAGE_TOKENS, decode_slot_count
from trainers.engine.scheduler import slot_bucket
from trainers.loop.policy import model_config_for, tokenizer_for
from trainers.loop.trainer import logprob_pass_batch
from trainers.loop.update import TrainingFunctions, completion_width, training_functions
from trainers.models.backend import lowering_for
from trainers.models.generate import cast_for_generation, static_graph
from trainers.models.hf_weights import abstract_params
from trainers.models.paged_attention import default_implementation, paged_decode_attention
from trainers.models.presets import ModelConfig
from trainers.models.segment_attention import shares_prompts
from trainers.rollout.spec import RolloutSpec
from trainers.step.packing import pack_micro_batches
from trainers.step.plan import BatchPlan, make_plan, shared_prompt_group

PLATFORMS = ("cuda", "tpu")
MODELS = ("smollm2-135m", "qwen2-0.5b")
DECODE_PROGRAMS = ("decode_chunk", "admit_and_decode")  # the programs with decode steps
PACKED_PROGRAMS = ("packed_logprobs", "packed_update")  # the programs over packed rows

# The custom call each paged-attention kernel lowers to.
KERNEL_CALLS = {"pallas_gpu": "__gpu$xla.gpu.triton", "pallas_tpu": "tpu_custom_call"}
SEGMENT_KERNEL_CALLS = {"cuda": KERNEL_CALLS["pallas_gpu"], "tpu": KERNEL_CALLS["pallas_tpu"]}  # packed attention

PROMPT_TOKENS = 128
COMPLETION_TOKENS = 64  # with the 128 prompt tokens: 12 pages of 16 tokens per slot
PREFILL_PIECE_TOKENS = 64  # below the prompt width: the engine prefills in pieces


def lowering_config(preset: str) -> ExperimentConfig:
    """A run of the demo's size (smollm2-arith.yaml) on `preset`'s shape in bfloat16."""
    return parse_config(
        {
            "model": {"preset": preset, "dtype": "bfloat16"},
            "data": {"max_prompt_tokens": PROMPT_TOKENS},
            "rollout": {
                "max_new_tokens": COMPLETION_TOKENS,
                "temperature": 0.7,
                "prefill_chunk_tokens": PREFILL_PIECE_TOKENS,
            },
            "batch": {"prompts_per_step": 8, "train_micro_batch_sequences": 24},
            "grpo": {"num_generations": 6},
        }
    )


@dataclasses.dataclass(frozen=True)
class Run:
    """What a run under a config traces its programs with, all abstract."""

    config: ExperimentConfig
    model: ModelConfig
    plan: BatchPlan
    spec: RolloutSpec
    graphdef: Any
    params: Any  # float32 master weights, ShapeDtypeStructs
    opt_state: Any
    functions: TrainingFunctions


def run_for(config: ExperimentConfig) -> Run:
    """The plan, rollout spec, parameters, optimizer state and training functions `GRPOTrainer`
    builds for `config` (one device, no mesh), the arrays as ShapeDtypeStructs."""
    model = model_config_for(config)
    plan = make_plan(config)
    spec = RolloutSpec.from_config(config, tokenizer_for(config), plan.rollout_micro_batch_sequences)
    graphdef, params = abstract_params(model)
    schedule = make_schedule(config.optimizer, plan.optimizer_updates_per_step, config.train.max_steps)
    optimizer = make_optimizer(config.optimizer, schedule)
    opt_state = jax.eval_shape(optimizer.init, params)
    # the synchronous source without dynamic sampling: no importance weights (`SyncRolloutSource`)
    functions = training_functions(config, graphdef, optimizer, plan.needs_old_logprobs, importance=None)
    return Run(config, model, plan, spec, graphdef, params, opt_state, functions)


def abstract(tree: Any) -> Any:
    """Every array of `tree` as a ShapeDtypeStruct of its shape and dtype."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)


def ints(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.int32)


def bools(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.bool_)


def floats(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


# ----------------------------------------------------------------------------------------------
# The engine's programs, at the shapes `batching.generate_paged` gives them for a rollout call
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EngineShapes:
    """The sizes of a generation call of a rollout micro-batch, as `collect.generate_sequences`
    and `batching._Run` set them: groups of `group` completions, `slots` decode slots, prompts of
    `prompt_tokens`, pages of `page_tokens`, `max_pages` per slot, `num_pages` in the pool (the
    scratch page one past them)."""

    group: int
    admitted_groups: int  # the first admission's groups, padded to a power of two
    slots: int
    prompt_tokens: int
    page_tokens: int
    max_pages: int
    num_pages: int
    chunk_tokens: int
    piece_tokens: int


def engine_shapes(run: Run) -> EngineShapes:
    spec, sampling = run.spec, run.spec.sampling
    rows, group = run.plan.rollout_micro_batch_sequences, spec.num_generations
    settings = EngineSettings(
        num_slots=decode_slot_count(spec.decode_slots, rows, rows, group),
        chunk_tokens=spec.decode_chunk_tokens,
        prefill_chunk_tokens=spec.prefill_chunk_tokens,
    )
    page = settings.page_tokens
    max_pages = -(-(PROMPT_TOKENS + sampling.max_new_tokens) // page)
    groups = min(rows // group, settings.num_slots // group)
    return EngineShapes(
        group=group,
        admitted_groups=1 << (groups - 1).bit_length(),
        slots=settings.num_slots,
        prompt_tokens=PROMPT_TOKENS,
        page_tokens=page,
        max_pages=max_pages,
        num_pages=settings.num_slots * max_pages,
        chunk_tokens=settings.chunk_tokens,
        piece_tokens=settings.prefill_chunk_tokens,
    )


def engine_inputs(run: Run) -> tuple[EngineShapes, Any, Any, Any]:
    """(shapes, the engine's static graph, its bfloat16 weights as the rollout casts them
    (`Placement.generation_weights`), each layer's key and value pages)."""
    shapes = engine_shapes(run)
    m = run.model
    weights = jax.eval_shape(lambda p: cast_for_generation(p, run.config.model.dtype), run.params)
    page_shape = (m.num_kv_heads, shapes.num_pages + 1, shapes.page_tokens, m.head_dim)
    pages = jax.ShapeDtypeStruct(page_shape, jnp.dtype(m.dtype))
    return shapes, static_graph(run.graphdef), weights, [(pages, pages) for _ in range(m.num_layers)]


def admission(shapes: EngineShapes) -> programs.Admission:
    """`programs.admit`'s arrivals (`_Run.admit`)."""
    n, width, page, group = shapes.admitted_groups, shapes.prompt_tokens, shapes.page_tokens, shapes.group
    return programs.Admission(
        prompt_tokens=ints(n, width),
        prompt_valid=bools(n, width),
        pages=ints(n, width),
        offsets=ints(n, width),
        tail_columns=ints(n, page),
        tail_pages=ints(n, group - 1, page),
        uniforms=floats(n * group),
    )


def sampling_for(run: Run):
    """The rollout's sampling: whole groups share a prompt's pages (`collect.generate_sequences`)."""
    return dataclasses.replace(run.spec.sampling, prompt_group=run.spec.num_generations)


def view_tokens_for(shapes: EngineShapes, attention: str) -> int:
    """The widest dense view a "view" chunk gathers (a table's worth of pages); 0 for "paged"."""
    return shapes.max_pages * shapes.page_tokens if attention == "view" else 0


def slot_batch(shapes: EngineShapes, bucket: int, chunk: int) -> programs.SlotBatch:
    """A single-turn chunk's bucket (`_Run.slot_batch`): no forced tokens, no stop sequences."""
    return programs.SlotBatch(
        tables=ints(bucket, shapes.max_pages),
        lengths=ints(bucket),
        last_token=ints(bucket),
        active=bools(bucket),
        generated=ints(bucket),
        uniforms=floats(bucket, chunk),
        forced_tokens=ints(bucket, 0),
        forced=bools(bucket, 0),
        recent_tokens=ints(bucket, 0),
        recent_sampled=bools(bucket, 0),
        exit_active=ints(),
        exit_steps_left=ints(),
    )


def decode_program(run: Run, shapes: EngineShapes, chunk: int) -> programs.DecodeProgram:
    attention = decode_attention(run.model.head_dim, shapes.page_tokens)
    return programs.DecodeProgram(
        sampling_for(run), chunk, shapes.num_pages, None, attention, view_tokens_for(shapes, attention)
    )


def build_admit(run: Run) -> tuple[Callable, tuple, dict]:
    shapes, graph, weights, pages = engine_inputs(run)
    return programs.admit, (graph, weights, pages, admission(shapes), sampling_for(run)), {}


def build_prefill_piece(run: Run) -> tuple[Callable, tuple, dict]:
    shapes, graph, weights, pages = engine_inputs(run)
    n, group, piece = shapes.admitted_groups, shapes.group, shapes.piece_tokens
    inputs = programs.PrefillPiece(
        tokens=ints(n, piece),
        tables=ints(n, shapes.max_pages),
        done=ints(n),
        counts=ints(n),
        tail_source=ints(n),
        tail_pages=ints(n, group - 1),
        uniforms=floats(n * group),
    )
    # view_tokens: the second piece reads the first; the scratch page is one past the pool
    return programs.prefill_piece, (graph, weights, pages, inputs, sampling_for(run), piece, shapes.num_pages), {}


def build_decode_chunk(run: Run) -> tuple[Callable, tuple, dict]:
    shapes, graph, weights, pages = engine_inputs(run)
    bucket, chunk = slot_bucket(shapes.slots, shapes.slots), shapes.chunk_tokens
    slots = slot_batch(shapes, bucket, chunk)
    return programs.decode_chunk, (graph, weights, pages, slots, decode_program(run, shapes, chunk)), {}


def build_admit_and_decode(run: Run) -> tuple[Callable, tuple, dict]:
    shapes, graph, weights, pages = engine_inputs(run)
    bucket, chunk = slot_bucket(shapes.slots, shapes.slots), shapes.chunk_tokens
    positions = ints(shapes.admitted_groups * shapes.group)
    return (
        programs.admit_and_decode,
        (
            graph,
            weights,
            pages,
            admission(shapes),
            positions,
            slot_batch(shapes, bucket, chunk),
            decode_program(run, shapes, chunk),
        ),
        {},
    )


# ----------------------------------------------------------------------------------------------
# The log-prob passes and updates, on a step's arrays laid out as `GRPOTrainer` lays them
# ----------------------------------------------------------------------------------------------


def step_arrays(run: Run) -> dict[str, np.ndarray]:
    """One step's per-sequence arrays as `GRPOTrainer.train_on` gives its updates (before they are
    stacked by micro-batch), over a made-up rollout: left-padded prompts shared by each group,
    right-padded completions of long-tailed lengths, cut to `completion_width`. The prompts are
    short enough that packing pays with a prompt copy per sequence too (as a GPU or TPU packs)."""
    rng = np.random.default_rng(0)
    sequences, group = run.plan.sequences_per_step, run.plan.num_generations
    width_c, vocab = run.spec.sampling.max_new_tokens, run.model.vocab_size
    prompt_lengths = np.repeat(rng.integers(PROMPT_TOKENS // 16, PROMPT_TOKENS // 4 + 1, sequences // group), group)
    completion_lengths = np.clip(rng.geometric(4 / width_c, sequences), 1, width_c)
    completion_lengths[0] = width_c  # one completion runs to the budget
    prompt_valid = np.arange(PROMPT_TOKENS)[None, :] >= (PROMPT_TOKENS - prompt_lengths)[:, None]
    prompt_tokens = np.repeat(rng.integers(3, vocab, (sequences // group, PROMPT_TOKENS)), group, axis=0)
    completion_mask = np.arange(width_c)[None, :] < completion_lengths[:, None]
    width = completion_width(completion_mask)
    mask = completion_mask[:, :width]
    weights = mask / mask.sum()
    arrays = {
        "prompt_tokens": np.where(prompt_valid, prompt_tokens, 0).astype(np.int32),
        "prompt_valid": prompt_valid,
        "completion_tokens": np.where(mask, rng.integers(3, vocab, mask.shape), 0).astype(np.int32),
        "completion_mask": mask,
        "advantages": rng.standard_normal(sequences).astype(np.float32),
    }
    logprobs = np.where(mask, -1.0, 0.0).astype(np.float32)
    if run.plan.needs_old_logprobs:
        arrays["old_logprobs"] = logprobs
    if run.plan.needs_reference:
        arrays["ref_logprobs"] = logprobs
    if run.spec.sampling.truncates:
        arrays["gen_full_logprobs"] = logprobs
    else:
        arrays["gen_logprobs"] = logprobs
    arrays["on_policy"] = np.ones(sequences, bool)
    arrays["weights"] = weights.astype(np.float32)
    arrays["metric_weights"] = weights.astype(np.float32)
    arrays["mismatch_weights"] = weights.astype(np.float32)
    return arrays


def build_logprobs(run: Run, packed: bool) -> tuple[Callable, tuple, dict]:
    """A log-prob pass of the step as `GRPOTrainer._logprob_parts` runs it: packed, the step's rows in
    micro-batches of the default token budget (`logprob_pass_batch`), all in one program; padded,
    the plan's first log-prob slice."""
    arrays = step_arrays(run)
    inputs = {k: arrays[k] for k in ("prompt_tokens", "prompt_valid", "completion_tokens", "completion_mask")}
    params = run.params
    if packed:
        batch = logprob_pass_batch(run.plan, inputs, None, 1, True, shares_prompts())
        assert batch.packed
        rows = {k: v for k, v in batch.arrays.items() if k.startswith("packed_")}
        shape = (batch.arrays["sequence"].shape[1], inputs["completion_mask"].shape[1])
        return run.functions.packed_logprob_fn, (params, abstract(rows)), {"completion_shape": shape}
    s = run.plan.logprob_slices()[0]
    piece = {k: v[s.start : s.stop] for k, v in inputs.items()}
    group = shared_prompt_group(piece["prompt_tokens"], piece["prompt_valid"], run.plan.num_generations)
    a = abstract(piece)
    return (
        run.functions.logprob_fn,
        (params, a["prompt_tokens"], a["prompt_valid"], a["completion_tokens"], a["completion_mask"]),
        {"prompt_group": group},
    )


def build_update(run: Run, packed: bool) -> tuple[Callable, tuple, dict]:
    """The step's first optimizer update, its micro-batches stacked [A, M, ...] and packed (or not)
    as `GRPOTrainer.train_on` runs it."""
    arrays = step_arrays(run)
    update = run.plan.updates()[0]
    stacked = {k: np.stack([v[m.start : m.stop] for m in update.micro_batches]) for k, v in arrays.items()}
    group = shared_prompt_group(stacked["prompt_tokens"], stacked["prompt_valid"], run.plan.num_generations)
    batch = pack_micro_batches(stacked, group, 1, packed, share_prompts=shares_prompts())
    assert batch.packed == packed
    group = 1 if batch.packed else group
    return (
        run.functions.update_fn,
        (run.params, run.opt_state, abstract(batch.arrays)),
        {"prompt_group": group},
    )


BUILDERS: dict[str, Callable[[Run], tuple[Callable, tuple, dict]]] = {
    "admit": build_admit,
    "prefill_piece": build_prefill_piece,
    "decode_chunk": build_decode_chunk,
    "admit_and_decode": build_admit_and_decode,
    "logprobs": lambda run: build_logprobs(run, packed=False),
    "packed_logprobs": lambda run: build_logprobs(run, packed=True),
    "update": lambda run: build_update(run, packed=False),
    "packed_update": lambda run: build_update(run, packed=True),
}


@pytest.mark.parametrize("program", list(BUILDERS))
@pytest.mark.parametrize("preset", MODELS)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_program_lowers(platform, preset, program):
    """`program` of a run on `preset`, traced as for `platform`, lowers for it; a decode step's
    program holds the paged-attention kernel the platform picks, or none where it picks the gather;
    a packed program holds the platform's segment-attention kernel, a padded one no kernel."""
    with lowering_for(platform):
        run = run_for(lowering_config(preset))
        fn, args, kwargs = BUILDERS[program](run)
        text = fn.trace(*args, **kwargs).lower(lowering_platforms=(platform,)).as_text()
        implementation = default_implementation(run.model.head_dim, PAGE_TOKENS)
    assert "func.func public @main" in text
    calls = [call for call in KERNEL_CALLS.values() if call in text]
    if program in DECODE_PROGRAMS:
        expected = KERNEL_CALLS.get(implementation)
        assert calls == ([expected] if expected else [])
    elif program in PACKED_PROGRAMS:
        assert calls == [SEGMENT_KERNEL_CALLS[platform]]
    elif program in ("logprobs", "update"):
        assert calls == []


# ----------------------------------------------------------------------------------------------
# The kernels' own limits
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "implementation", "head_dim", "pages_per_slot", "fits"),
    [
        ("cuda", "pallas_gpu", 64, 12, True),  # compute blocks of 4 pages: Triton takes powers of two only
        ("cuda", "pallas_gpu", 128, 11, True),
        ("cuda", "pallas_gpu", 96, 8, False),  # a head of 96: not a power of two
        ("tpu", "pallas_tpu", 128, 12, True),
        ("tpu", "pallas_tpu", 64, 12, False),  # SmolLM2's and Qwen2's heads: the TPU decodes with the gather
    ],
)
def test_kernel_fits(platform, implementation, head_dim, pages_per_slot, fits):
    """The paged-attention kernel lowers exactly where `default_implementation` picks it."""
    slots, num_heads, kv_heads, page_tokens = 8, 8, 2, 16
    pages = jax.ShapeDtypeStruct((kv_heads, slots * pages_per_slot + 1, page_tokens, head_dim), jnp.bfloat16)

    def attend(q, k_pages, v_pages, tables, lengths):
        return paged_decode_attention(q, k_pages, v_pages, tables, lengths, implementation=implementation)

    def lower():
        return (
            jax.jit(attend)
            .trace(
                jax.ShapeDtypeStruct((slots, num_heads, head_dim), jnp.bfloat16),
                pages,
                pages,
                ints(slots, pages_per_slot),
                ints(slots),
            )
            .lower(lowering_platforms=(platform,))
        )

    with lowering_for(platform):
        assert (default_implementation(head_dim, page_tokens) == implementation) == fits
        if fits:
            lower()
        else:
            with pytest.raises(ValueError, match="Pallas"):
                lower()
