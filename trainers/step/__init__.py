"""What one training step is made of, below both the loop that runs steps (`trainers.loop`) and the
rollouts that feed them (`trainers.rollout`), so neither reaches up into the other:

  plan.py            the batch plan the loop walks (JAX-free: `validate` and the web preview print it)
  placement.py       which devices hold the training state and the rollout weights
  hooks.py           the seam to whoever runs the trainer: `Hooks`, `Control`, `RunInfo`, `TrainResult`
  phases.py          the phase each thread is in and every thread's stack on SIGUSR1, for a watcher outside
"""
