"""The training loop: what a run does step after step (its rollouts come from `trainers.rollout`;
its batch plan, device placement and hooks from `trainers.step`).

  update.py          jitted log-prob passes and one optimizer update (accumulation, IS weights)
  trainer.py         `GRPOTrainer` and `train`: the loop, evaluation, checkpoints, reporting
  checkpoint.py      Orbax checkpoints (params, optimizer state, data position)
  run_files.py       hooks that write a run directory (metrics.jsonl, samples.jsonl, summary.json)
  scoring.py         greedy accuracy, mean reward and pass@k on held-out prompts (evaluation)
  policy.py          the policy a run starts from (model folder or preset), and a trained one from a run dir
  memory_estimate.py a step's device memory, from the config alone (JAX-free)
  system_metrics.py  CPU, memory and accelerator figures sampled during a run
  compile_cache.py   JAX's persistent compilation cache

The commands that use a trained policy (evaluate, generate, export) are in `trainers.commands`.
"""
