"""The generation engine: a paged KV cache (`pages`: which pages hold which slot's tokens; the
attention over them is `models.paged_attention`, which the transformer calls), the device programs
(`programs`) and continuous batching over a fixed number of decode slots (`batching.generate_paged`),
the one way the trainer generates. Sits above `models` (it runs the transformer) and below `rollout`
and `loop` (which generate through it)."""
