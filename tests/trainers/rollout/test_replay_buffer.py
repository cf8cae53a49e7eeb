"""The versioned replay buffer: hand cases, and its invariants as property-based tests."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers.rollout.replay_buffer import (
    ReplayBuffer,
    TrajectoryGroup,
    default_capacity,
    target_step,
)


def g(index, version, payload=None):
    return TrajectoryGroup(prompt_index=index, weight_version=version, payload=payload)


def indices(groups):
    return [x.prompt_index for x in groups]


# --- hand cases --------------------------------------------------------------------------------


def test_take_waits_for_the_whole_window_then_returns_it_in_data_order():
    buf = ReplayBuffer(capacity_groups=4, max_age_steps=1)
    assert buf.put(g(1, 0, "b")) and buf.put(g(0, 0, "a"))
    assert buf.take(0, 3) is None  # prompt 2 missing: nothing removed
    assert buf.size_groups == 2
    assert buf.put(g(2, 0, "c"))
    taken = buf.take(0, 3)
    assert indices(taken) == [0, 1, 2] and [x.payload for x in taken] == ["a", "b", "c"]
    assert (buf.next_prompt_index, buf.next_step, buf.size_groups) == (3, 1, 0)


def test_groups_arriving_out_of_order_wait_for_their_turn():
    buf = ReplayBuffer(capacity_groups=4, max_age_steps=1)
    for i in (3, 2, 1):
        assert buf.put(g(i, 0))
    assert buf.take(0, 2) is None  # prompt 0 is slow; 1..3 are not trained before it
    buf.put(g(0, 0))
    assert indices(buf.take(0, 2)) == [0, 1]
    assert indices(buf.take(1, 2)) == [2, 3]


@pytest.mark.parametrize(
    "max_age, step, trained", [(1, 10, True), (1, 11, True), (1, 12, False), (0, 10, True), (0, 11, False)]
)
def test_age_window_weights_v_train_steps_v_to_v_plus_max_age(max_age, step, trained):
    buf = ReplayBuffer(capacity_groups=2, max_age_steps=max_age, next_step=10)
    buf.put(g(0, 10))
    taken = buf.take(step, 1)
    assert (taken is not None) == trained
    assert buf.dropped_stale == (0 if trained else 1)


def test_stale_groups_are_dropped_counted_and_queued_for_regeneration():
    buf = ReplayBuffer(capacity_groups=8, max_age_steps=1)
    for i in range(4):
        buf.put(g(i, 0))
    assert indices(buf.take(0, 2)) == [0, 1]
    # Step 2: version 0 is 2 steps old (max 1): prompts 2 and 3 are dropped, not trained.
    assert buf.take(2, 2) is None
    assert (buf.dropped_stale, buf.size_groups) == (2, 0)
    assert buf.pop_dropped() == [2, 3] and buf.pop_dropped() == []
    buf.put(g(3, 2))
    buf.put(g(2, 1))
    taken = buf.take(2, 2)
    assert indices(taken) == [2, 3] and buf.last_take_age_mean_steps == 0.5
    assert buf.metrics() == {"async/buffer_size": 0.0, "async/trajectory_age_mean": 0.5, "async/dropped_stale": 2.0}


def test_put_refuses_beyond_the_window_and_rejects_repeats():
    buf = ReplayBuffer(capacity_groups=2, max_age_steps=1)
    assert buf.has_room_for(1) and not buf.has_room_for(2)
    assert buf.put(g(2, 0)) is False and buf.size_groups == 0  # beyond the window: retry later
    assert buf.put(g(0, 0)) and buf.put(g(1, 0))
    with pytest.raises(ValueError, match="already buffered"):
        buf.put(g(1, 0))
    buf.take(0, 2)
    assert buf.put(g(2, 0))  # the window moved
    with pytest.raises(ValueError, match="already trained"):
        buf.put(g(1, 1))
    with pytest.raises(ValueError, match=">= 0"):
        buf.put(g(-1, 0))


def test_a_missing_early_group_is_always_accepted_even_when_later_ones_wait():
    # The window never refuses what the next take needs: no deadlock behind a full buffer.
    buf = ReplayBuffer(capacity_groups=3, max_age_steps=2)
    assert buf.put(g(1, 0)) and buf.put(g(2, 0))
    assert not buf.put(g(3, 0))
    assert buf.put(g(0, 0))
    assert indices(buf.take(0, 3)) == [0, 1, 2]


def test_programming_errors_raise_instead_of_waiting_forever():
    buf = ReplayBuffer(capacity_groups=4, max_age_steps=1)
    buf.put(g(0, 3))
    with pytest.raises(ValueError, match="newer than step 2"):
        buf.take(2, 1)
    assert indices(buf.take(3, 1)) == [0]
    with pytest.raises(ValueError, match="already taken"):
        buf.take(3, 1)
    with pytest.raises(ValueError, match="count"):
        buf.take(4, 5)  # more than the capacity: could never be satisfied
    with pytest.raises(ValueError):
        ReplayBuffer(capacity_groups=0, max_age_steps=1)


def test_target_step_tells_the_collector_which_step_trains_a_prompt():
    assert [target_step(i, 8, 2, 4) for i in (8, 11, 12, 19)] == [2, 2, 3, 4]
    buf = ReplayBuffer(capacity_groups=8, max_age_steps=1, next_prompt_index=8, next_step=2)
    assert buf.target_step(12, 4) == 3
    with pytest.raises(ValueError):
        buf.target_step(7, 4)


def test_default_capacity():
    assert default_capacity(16, 1) == 32
    assert default_capacity(16, 0) == 32  # max age 0 counts as 1: two steps of prompts
    assert default_capacity(8, 3) == 48


@pytest.mark.parametrize("max_age", [0, 1, 2])
def test_a_collector_that_asks_target_step_never_produces_stale_groups(max_age):
    # One collector in data order, weights published after each step; it generates prompt i with the
    # newest weights only if target_step(i) - version <= max_age, and only while there is room.
    prompts, steps = 3, 12
    buf = ReplayBuffer(default_capacity(prompts, max_age), max_age)
    version, next_prompt, ages = 0, 0, []
    for step in range(steps):
        while buf.has_room_for(next_prompt) and buf.target_step(next_prompt, prompts) - version <= max_age:
            assert buf.put(g(next_prompt, version))
            next_prompt += 1
        taken = buf.take(step, prompts)
        assert taken is not None and indices(taken) == list(range(step * prompts, (step + 1) * prompts))
        ages += [step - x.weight_version for x in taken]
        version = step + 1  # the trainer's update publishes new weights
    assert buf.dropped_stale == 0
    assert max(ages) == max_age  # the collector runs as far ahead as allowed
    if max_age == 0:
        assert set(ages) == {0}  # on-policy, as the synchronous loop


# --- properties --------------------------------------------------------------------------------


ops = st.lists(
    st.one_of(
        # (put, offset of its prompt from the next untrained one, version lag behind the current step)
        st.tuples(
            st.just("put"), st.one_of(st.integers(0, 3), st.integers(0, 14)), st.one_of(st.just(0), st.integers(0, 4))
        ),
        st.tuples(st.just("take"), st.just(0), st.just(0)),
        st.tuples(st.just("step"), st.just(0), st.just(0)),  # time passes: the next take is for a later step
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 10),
    max_age=st.integers(0, 3),
    count_frac=st.floats(0, 1),
    start=st.integers(0, 50),
    start_step=st.integers(0, 5),
    program=ops,
)
def test_buffer_invariants(capacity, max_age, count_frac, start, start_step, program):
    count = 1 + int(count_frac * (capacity - 1))
    buf = ReplayBuffer(capacity, max_age, next_prompt_index=start, next_step=start_step)
    step = start_step
    accepted, returned, dropped = 0, [], []
    for op, offset, lag in program:
        if op == "put":
            index = buf.next_prompt_index + offset
            version = max(0, step - lag)
            if index in buf.buffered_prompt_indices():
                with pytest.raises(ValueError):
                    buf.put(g(index, version))
                continue
            ok = buf.put(g(index, version))
            assert ok == (offset < capacity)  # refused exactly beyond the window
            accepted += ok
        elif op == "step":
            step += 1
        else:
            before = buf.next_prompt_index
            taken = buf.take(step, count)
            dropped += buf.pop_dropped()
            if taken is None:
                # None only when a prompt of the window is missing (after stale groups were dropped).
                assert any(i not in buf.buffered_prompt_indices() for i in range(before, before + count))
                assert buf.next_prompt_index == before
            else:
                assert len(taken) == count
                assert indices(taken) == list(range(before, before + count))  # data order, contiguous
                assert all(0 <= step - x.weight_version <= max_age for x in taken)
                returned += indices(taken)
                step += 1
        assert buf.size_groups <= capacity
        assert buf.next_step <= step
        # Nothing lost, nothing duplicated: every accepted group is returned, dropped or still here.
        assert accepted == len(returned) + buf.dropped_stale + buf.size_groups
        assert buf.dropped_stale == len(dropped)
        assert returned == list(range(start, start + len(returned)))  # no prompt skipped or repeated
        assert buf.next_prompt_index == start + len(returned)  # a checkpoint's data position


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 8), max_age=st.integers(0, 3), program=ops)
def test_every_prompt_is_trained_once_when_dropped_ones_are_regenerated(capacity, max_age, program):
    # A collector that regenerates what pop_dropped reports (before new prompts) with the newest
    # weights: the trained prompts are exactly 0..n-1, each once, each fresh at its step.
    count = max(1, capacity // 2)
    buf = ReplayBuffer(capacity, max_age)
    step, todo, next_new, trained = 0, [], 0, []
    for op, _, lag in program:
        if op == "put":
            index = todo.pop(0) if todo else next_new
            if not buf.has_room_for(index):
                if index == next_new:
                    continue
                todo.insert(0, index)
                continue
            assert buf.put(g(index, max(0, step - lag)))
            next_new = max(next_new, index + 1)
        elif op == "step":
            step += 1
        else:
            taken = buf.take(step, count)
            todo = sorted(todo + buf.pop_dropped())
            if taken is not None:
                assert all(0 <= step - x.weight_version <= max_age for x in taken)
                trained += indices(taken)
                step += 1
    assert trained == list(range(len(trained)))
    assert not set(buf.buffered_prompt_indices()) & set(todo)  # a prompt is buffered or to be regenerated
    assert not set(trained) & (set(buf.buffered_prompt_indices()) | set(todo))
