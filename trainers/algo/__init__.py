"""The GRPO family of algorithms as registries of pure functions, tested against hand-computed values.

names.py       the JAX-free name tuples (estimators, losses, aggregations, KL) and clip defaults
registry.py    Registry / Entry: name -> pure function, its metric keys and its formula
advantages.py  group-relative advantages (grpo, drgrpo, rloo)
loss.py        policy losses (grpo, gspo, gspo-token, cispo), aggregation weights, KL, entropy bonus
importance.py  truncated importance weights pi_old / pi_generator (asynchronous GRPO)
optim.py       the Optax optimizer and learning-rate schedule of a config
"""
