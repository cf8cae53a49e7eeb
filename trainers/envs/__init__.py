"""Environments: what a rollout's episodes talk to, turn by turn (JAX-free).

  base.py          the protocol: `Environment` (reset, step, Settings, stop_strings), `EpisodeState`,
                   `StepResult`, `NoSettings`
  registry.py      `ENVIRONMENTS` (a `trainers.registry.Registry`), `resolve` (a built-in or a dotted path
                   package.module:Class, by the registries' one rule),
                   `make_environment` (settings checked), `EnvError` naming env.name / env.settings.<field>
  single_turn.py   `SingleTurn`: one prompt, one completion (the default; today's rollout)
  calculator.py    `Calculator`: answers <tool_call> calculator calls; its `SYSTEM_PROMPT`
  arithmetic.py    the calculator's safe, exact, bounded evaluator on `ast` (never eval)
  guess_number.py  `GuessNumber`: guess a secret number, told higher or lower each turn

The turn loop that runs episodes against them lives in `trainers.rollout`; the config checks
(`trainers.config.checks`) resolve env.name and validate env.settings before a run starts.
"""
