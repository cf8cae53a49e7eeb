"""Data: what a run trains on and how it is scored. JAX-free except the prompt stream's grain.

tasks.py          built-in tasks (generated examples, their rewards and completion budgets)
word_problems.py  arithmetic word problems (the arithmetic_words task, `make-dataset arithmetic-words`)
examples.py       dataset items from a task or JSONL files (`load_examples`, `read_jsonl`, `parse_example_line`)
prompt_stream.py  the epoch-after-epoch, per-epoch-shuffled stream a run's data position indexes
tokenizer.py      the built-in character tokenizer; `load_tokenizer` ("char" or a model folder)
hf_tokenizer.py   a pretrained model's own tokenizer (tokenizer.json + configs), same interface
chat_template.py  chat message lists and Hugging Face chat templates (jinja2, as transformers renders them)
encoding.py       prompts -> left-padded token arrays
rewards.py        reward functions by name, and the accuracy criterion
"""
