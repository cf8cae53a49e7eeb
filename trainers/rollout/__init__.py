"""The rollout wing: how prompts become scored sequences a training step learns from.

batch.py            `Rollout`: prompts, their G sequences each, rewards and advantages (host arrays)
spec.py             `RolloutSpec`: how a run samples, renders prompts and scores (fixed for the run)
prompt_fit.py       the prompts as episodes start, and whether they fit data.max_prompt_tokens (JAX-free)
collect.py          `collect_rollout`: encode -> generate -> decode -> score -> advantages, in steps
dynamic_sampling.py DAPO dynamic sampling: a step made of informative groups only
source.py           where a step's rollout comes from: the interface and the synchronous source
async_source.py     the asynchronous source: the trainer takes steps from a replay buffer...
collector.py        ...that a collector thread fills ahead of training with the newest weights
replay_buffer.py    the versioned replay buffer (pure Python): data order, staleness, capacity
"""
