"""The GRPO family of algorithms as registries of pure functions, tested against hand-computed values.

names.py       the registries (trainers.registry), declared with their names, JAX-free: estimators,
               losses, aggregations, KL, mismatch corrections, optimizers, schedules; and the clip defaults
advantages.py  group-relative advantages (grpo, drgrpo, rloo)
loss.py        policy losses (grpo, gspo, gspo-token, cispo), aggregation weights, KL, entropy bonus
importance.py  truncated importance weights pi_old / pi_generator (asynchronous GRPO)
mismatch.py    the sampler/trainer log-prob gap per step, and its corrections (tis, mis, icepop, geo-mask)
optim.py       the Optax optimizers and learning-rate schedules (registered), and those of a config
"""
