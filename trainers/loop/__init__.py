"""The training loop: what a run does step after step (its rollouts come from `trainers.rollout`;
its batch plan, device placement and hooks from `trainers.step`).

  update.py          jitted log-prob passes and one optimizer update (accumulation, IS weights)
  trainer.py         `GRPOTrainer` and `train`: the loop, evaluation, checkpoints, reporting
  checkpoint.py      Orbax checkpoints (params, optimizer state, data position)
  run_files.py       hooks that write a run directory (metrics.jsonl, samples.jsonl, summary.json)
  policy.py          the policy a run starts from (model folder or preset), and a trained one from a run dir
  generation.py      completions of a loaded policy for a list of prompts (the `generate` command)
  export.py          a run's checkpoint -> a Hugging Face folder (the `export` command)
"""
