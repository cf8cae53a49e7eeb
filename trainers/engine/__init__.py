"""The generation engine (issue 31), built in steps: a paged KV cache (`pages`: which pages hold
which slot's tokens; the attention over them is `models.paged_attention`, which the transformer
calls) and continuous batching over a fixed number of decode slots (`batching.generate_paged`).
Sits above `models` (it runs the transformer) and below `rollout` (which will generate through it)."""
