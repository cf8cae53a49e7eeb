"""What a run chooses for null fields so its step fits the memory it has (`memory_estimate.fit_step`):
remat, then the train micro-batch; the estimate's remat part by hand; the query chunk of long key
spans by hand. No JAX is loaded."""

import dataclasses

import pytest

from tests.trainers.loop.test_memory_estimate import P_BYTES, TINY, TINY_PARAMETERS, plan_of
from trainers.loop.memory_estimate import (
    FIT_FRACTION,
    block_parameter_count,
    estimate_step_memory,
    fit_step,
    forward_elements,
    memory_refusal,
    optimizer_moments,
    remat_kept_elements,
)
from trainers.models.presets import ATTENTION_CHUNK_BYTES, query_chunk_tokens


def test_block_parameters_and_what_remat_keeps_by_hand():
    # tiny: 2 blocks of 61600 parameters (see test_memory_estimate); a layer's input (64) and its keys
    # and values (2 x 2 KV heads x 16)
    assert block_parameter_count(TINY) == 2 * 61600 == TINY_PARAMETERS - 8192 - 64 - 8192
    assert remat_kept_elements(TINY) == 64 + 2 * 2 * 16 == 128


def test_the_update_under_remat_by_hand():
    """The tiny step of test_memory_estimate (train micro-batch of 8 = 2 groups of 4 sharing a prompt
    of 12 tokens, completions of 4) with remat: every layer keeps 128 values per position over the
    2 x 12 + 8 x 4 = 56 positions, one layer's values are alive while it is recomputed, and the
    scan holds the blocks stacked twice (weights and gradients)."""
    config, plan = plan_of()
    plain = estimate_step_memory(plan, TINY, optimizer_moments(config.optimizer))
    remat = estimate_step_memory(plan, dataclasses.replace(TINY, remat=True), optimizer_moments(config.optimizer))
    update = {p.name: p.bytes for p in remat.phases}["update"]
    gradients = 2 * P_BYTES  # accumulation 2: the running sum and the micro-batch's
    layer = forward_elements(TINY, 8, 4, 12, 4)
    kept = 2 * 56 * 128 + layer
    stacked = 2 * 2 * 61600 * 4
    logits = 4 * 32 * 128 * 4
    assert update == gradients + kept * 4 + stacked + logits
    assert {p.name: p.bytes for p in plain.phases}["update"] == gradients + 2 * layer * 4 + logits
    logprob = {p.name: p.bytes for p in remat.phases}["log-prob"]
    assert logprob == {p.name: p.bytes for p in plain.phases}["log-prob"] + 2 * 61600 * 4  # the stacked weights
    assert remat.remat and not plain.remat


def long_config(**batch):
    """1 prompt x G 4 of SmolLM2-135M's shape with 4,096 forced tokens and a KL term: far over 24
    GiB without remat (27 GiB), about 10 GiB with it."""
    return plan_of(
        model={"preset": "smollm2-135m"},
        data={"max_prompt_tokens": 64},
        rollout={"max_new_tokens": 4096, "stop_at_eos": False},
        batch={
            "prompts_per_step": 1,
            "train_micro_batch_sequences": None,
            "rollout_micro_batch_sequences": None,
            "logprob_micro_batch_sequences": None,
            **batch,
        },
    )


GIB = 1024**3


def test_a_step_that_fits_is_left_as_it_is():
    config, plan = long_config()
    fitted = fit_step(config, plan, 1000 * GIB)
    assert not fitted.remat and fitted.plan == plan and fitted.memory.automatic == ()
    assert fit_step(config, plan, None).plan == plan  # no memory known: nothing chosen


def test_null_remat_turns_on_when_the_step_does_not_fit_without_it():
    config, plan = long_config()
    plain = fit_step(config, plan, None).memory.total_bytes
    fitted = fit_step(config, plan, 24 * GIB)
    assert plain > 24 * GIB * FIT_FRACTION
    assert fitted.remat and fitted.memory.remat
    assert fitted.memory.total_bytes <= 24 * GIB * FIT_FRACTION < plain
    assert fitted.plan == plan  # remat was enough: the micro-batch stays the whole mini-batch
    (line,) = fitted.memory.automatic
    assert line == f"remat on (model.remat null: {plain / GIB:.2f} GiB without it)"
    assert f"chosen to fit the memory      {line}" in fitted.memory.describe()


def test_remat_set_false_is_never_turned_on_and_the_refusal_says_it_would_help():
    config, plan = long_config()
    config = config.model_copy(update={"model": config.model.model_copy(update={"remat": False})})
    fitted = fit_step(config, plan, 24 * GIB)
    assert not fitted.remat
    assert fitted.plan.train_micro_batch_sequences < 4  # only the null micro-batch could be chosen
    refusal = memory_refusal(fit_step(config, plan, 2 * GIB).memory, 2 * GIB, "this machine's")
    assert refusal.endswith("or set model.remat true (about a third more compute in the update)")


def test_a_null_micro_batch_is_lowered_after_remat_whole_groups_first():
    """With too little memory even under remat the train micro-batch goes down the divisors of the
    mini-batch (4 sequences: 2, then 1) until the step fits; a set micro-batch is never changed."""
    config, plan = long_config()
    with_remat = fit_step(config, plan, 24 * GIB).memory.total_bytes
    fitted = fit_step(config, plan, int(with_remat * 0.95 / FIT_FRACTION))
    assert fitted.remat and fitted.plan.train_micro_batch_sequences == 2
    assert fitted.plan.accumulation_steps == 2 and fitted.plan.logprob_micro_batch_sequences == 2
    assert fitted.memory.automatic[1] == (
        f"train micro-batch 2 sequences (batch.train_micro_batch_sequences null: {with_remat / GIB:.2f} GiB "
        "with the whole mini-batch of 4)"
    )
    fixed_config, fixed_plan = long_config(train_micro_batch_sequences=4)
    assert fit_step(fixed_config, fixed_plan, int(with_remat * 0.95 / FIT_FRACTION)).plan == fixed_plan


def test_micro_batches_of_whole_groups_come_before_split_groups():
    """A mini-batch of 24 sequences in groups of 6 on 2 devices: sizes that hold whole groups and
    split evenly (12, 6) come first, largest first, then the others (8, 4, 2)."""
    from trainers.loop.memory_estimate import _smaller_micro_batches

    config, plan = plan_of(
        batch={"prompts_per_step": 4, "train_micro_batch_sequences": None, "logprob_micro_batch_sequences": None},
        grpo={"num_generations": 6},
        mesh={"data": 2},
    )
    assert plan.train_micro_batch_sequences == 24
    assert _smaller_micro_batches(plan) == [12, 6, 8, 4, 2]


@pytest.mark.parametrize(
    ("rows", "heads", "keys", "chunk"),
    [
        (4, 9, 1088, 512),  # 4 x 9 x 512 x 1088 x 4 B = 76.5 MiB: the whole 512
        (4, 9, 2112, 256),  # 512 would be 148.5 MiB
        (4, 9, 16448, 32),  # 128 MiB / (4 x 9 x 16448 x 4 B) = 56.7 -> 32
        (64, 32, 1 << 20, 16),  # never under 16
    ],
)
def test_the_query_chunk_shrinks_over_long_key_spans(rows, heads, keys, chunk):
    assert query_chunk_tokens(rows, heads, keys) == chunk
    if chunk > 16:  # the largest power of two whose scores fit (512 at most)
        assert rows * heads * chunk * keys * 4 <= ATTENTION_CHUNK_BYTES
        assert chunk == 512 or rows * heads * 2 * chunk * keys * 4 > ATTENTION_CHUNK_BYTES
    assert query_chunk_tokens(rows, heads, keys, limit=8) == 8  # a limit under the floor holds


def test_the_trainer_trains_with_what_it_chose_and_says_so(tmp_path, monkeypatch):
    """A trainer whose memory holds its step with remat but not without builds its model with remat
    (`fit_step` over `devices.run_memory_bytes`) and says so in the run's log at its start; with
    ample memory it leaves remat off."""
    from trainers import devices
    from trainers.loop.trainer import GRPOTrainer
    from trainers.step.hooks import Hooks

    class Log(Hooks):
        def __init__(self):
            self.lines = []

        def on_log(self, message, level="info"):
            self.lines.append(message)

    config, plan = plan_of(
        rollout={"max_new_tokens": 512, "stop_at_eos": False},
        batch={"prompts_per_step": 2, "train_micro_batch_sequences": None, "logprob_micro_batch_sequences": None},
        train={"max_steps": 1},
        eval={"before_training": False, "every_steps": 0},
        checkpoint={"every_steps": 0},
    )
    plain = fit_step(config, plan, None).memory.total_bytes
    remat_config = config.model_copy(update={"model": config.model.model_copy(update={"remat": True})})
    with_remat = fit_step(remat_config, plan, None).memory.total_bytes
    memory = int((plain + with_remat) / 2 / FIT_FRACTION)
    expected = fit_step(config, plan, memory)
    assert expected.remat and expected.plan == plan and len(expected.memory.automatic) == 1

    monkeypatch.setattr(devices, "run_memory_bytes", lambda: memory)
    log = Log()
    trainer = GRPOTrainer(config, str(tmp_path / "run"), log)
    assert trainer.model_config.remat and trainer.plan.train_micro_batch_sequences == plan.train_micro_batch_sequences
    trainer.run()
    assert [line for line in log.lines if line.startswith("chosen to fit the memory: ")] == [
        f"chosen to fit the memory: {expected.memory.automatic[0]}"
    ]

    monkeypatch.setattr(devices, "run_memory_bytes", lambda: 1000 * GIB)
    assert not GRPOTrainer(config, str(tmp_path / "ample"), Log()).model_config.remat
