"""The GRPO algorithm as pure functions, tested against hand-computed values.

  advantages.py  group-relative advantages (grpo, rloo, drgrpo)
  loss.py        clipped surrogate, dual clip, KL penalty, loss aggregation weights
  importance.py  truncated importance weights pi_old / pi_generator (asynchronous GRPO)
  optim.py       the Optax optimizer and learning-rate schedule of a config
"""
