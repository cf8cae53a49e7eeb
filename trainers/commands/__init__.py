"""The commands that use a trained policy outside the training loop (`python -m trainers <command>`;
the platform's workers call them too):

  evaluate.py   score a model folder or a run's checkpoint on an eval set (`evaluate`)
  generate.py   completions of a loaded policy for a list of prompts (`generate`)
  export.py     a run's checkpoint -> a Hugging Face folder (`export`)
"""
