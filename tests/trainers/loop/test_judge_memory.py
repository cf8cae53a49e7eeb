"""The step memory estimate counts a judge model's weights (trainers.loop.memory_estimate)."""

from trainers.config import parse_config
from trainers.loop.memory_estimate import judge_weight_bytes, step_memory
from trainers.step.plan import make_plan

SMOLLM2_PARAMETERS = 134_515_008  # SmolLM2-135M: 30 layers of hidden 576, tied 49152-row embedding


def test_the_judge_weights_are_held_for_the_run(smollm2_dir):
    raw = {
        "data": {"task": "arithmetic"},
        "rewards": [{"name": "judge", "weight": 1.0}],
        "judge": {"model_path": str(smollm2_dir)},
    }
    config = parse_config(raw)
    parts = {part.name: part.bytes for part in step_memory(config, make_plan(config, 1000)).held}
    assert parts["judge model"] == 4 * SMOLLM2_PARAMETERS
    half = parse_config({**raw, "judge": {"model_path": str(smollm2_dir), "dtype": "bfloat16"}})
    assert judge_weight_bytes(half) == 2 * SMOLLM2_PARAMETERS
    # a judge section the rewards do not use holds nothing
    unused = parse_config({"data": {"task": "arithmetic"}, "judge": {"model_path": str(smollm2_dir)}})
    assert judge_weight_bytes(unused) == 0
    assert "judge model" not in {part.name for part in step_memory(unused, make_plan(unused, 1000)).held}
