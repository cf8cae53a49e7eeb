"""The generation engine (issue 31), built in steps: a paged KV cache (`pages`: which pages hold
which slot's tokens; `attention`: decode attention over those pages), then continuous batching
over a fixed number of decode slots. Sits above `models` (it runs the transformer) and below
`rollout` (which will generate through it)."""
