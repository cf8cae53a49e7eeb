"""Data: what a run trains on and how it is scored. JAX-free except the prompt stream's grain.

  tasks.py          built-in toy tasks (generated examples, their rewards and completion budgets)
  examples.py       dataset items from a task or JSONL files (`load_examples`, `read_jsonl`)
  prompt_stream.py  the epoch-after-epoch, per-epoch-shuffled stream a run's data position indexes
  tokenizer.py      the built-in character tokenizer
  encoding.py       prompts -> left-padded token arrays
  rewards.py        reward functions by name, and the accuracy criterion
"""
