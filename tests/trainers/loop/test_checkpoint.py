"""Checkpoint retention (keep_last + keep-best) and a save cut short by a kill."""

import jax.numpy as jnp
import numpy as np

from trainers.loop.checkpoint import Checkpointer


def _tree(value):
    return {"w": jnp.full((3,), value, jnp.float32)}


def test_keep_last_and_best(tmp_path):
    ckpt = Checkpointer(tmp_path / "c", keep_last=2, best_metric="reward/mean", best_mode="max")
    for step, reward in [(1, 0.1), (2, 0.9), (3, 0.2), (4, 0.3), (5, 0.1)]:
        ckpt.save(step, _tree(step), _tree(0), {"step": step}, {"reward/mean": reward})
    assert ckpt.all_steps() == [2, 4, 5]  # newest two, plus the best (step 2)
    ckpt.close()


def test_keep_best_by_min(tmp_path):
    ckpt = Checkpointer(tmp_path / "c", keep_last=1, best_metric="loss/policy", best_mode="min")
    for step, loss in [(1, 0.5), (2, -0.3), (3, 0.1)]:
        ckpt.save(step, _tree(step), _tree(0), {"step": step}, {"loss/policy": loss})
    assert ckpt.all_steps() == [2, 3]
    ckpt.close()


def test_restore_round_trip(tmp_path):
    ckpt = Checkpointer(tmp_path / "c")
    ckpt.save(7, _tree(1.5), _tree(2.5), {"step": 7, "data_position": 56}, {})
    params, opt_state, meta = ckpt.restore(7, _tree(0), _tree(0))
    np.testing.assert_array_equal(params["w"], [1.5] * 3)
    np.testing.assert_array_equal(opt_state["w"], [2.5] * 3)
    assert meta == {"step": 7, "data_position": 56}
    ckpt.close()


def test_a_save_cut_short_leaves_the_previous_checkpoint_usable(tmp_path):
    directory = tmp_path / "c"
    ckpt = Checkpointer(directory)
    ckpt.save(3, _tree(3.0), _tree(0), {"step": 3}, {})
    ckpt.close()
    # What a kill in the middle of saving step 4 leaves behind: Orbax's temporary directory, never renamed.
    partial = directory / "4.orbax-checkpoint-tmp-1234"
    (partial / "params").mkdir(parents=True)
    (partial / "params" / "half_written").write_bytes(b"\0" * 10)
    ckpt = Checkpointer(directory)
    assert ckpt.latest_step() == 3
    params, _, meta = ckpt.restore(3, _tree(0), _tree(0))
    assert meta["step"] == 3 and float(params["w"][0]) == 3.0
    ckpt.close()
    assert not partial.exists()  # cleaned up when the manager opened the directory
