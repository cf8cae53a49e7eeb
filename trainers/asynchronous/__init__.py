"""Asynchronous GRPO: rollouts generated ahead of training by a background collector.

  source.py         `AsyncRolloutSource`: the rollout source the trainer takes steps from
  collector.py      the collector thread: generates prompt groups with the newest weights it has
  replay_buffer.py  the versioned replay buffer (pure Python): data order, staleness, capacity
"""
