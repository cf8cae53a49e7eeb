"""grpo_client: the platform's command-line client. It speaks only the HTTP API (/api/, described
by GET /api/schema) with the standard library, so it runs anywhere Python 3.10+ does, without the
platform's code or dependencies.

Configure it from the environment:

    export GRPO_SERVER=http://127.0.0.1:8000     # the default
    export GRPO_TOKEN=<key>                      # from the platform's API tokens page

Commands (`python -m grpo_client COMMAND --help` for each):

    python -m grpo_client experiments list
    python -m grpo_client runs list [--status running --status queued] [--experiment ID]
    python -m grpo_client launch CONFIG.yaml [--name NAME | --experiment NAME|ID] [--set train.max_steps=50 ...]
                                 [--queue Q] [--max-restarts N]
        creates an experiment from the YAML with the overrides applied (one request: a refused
        config creates nothing), or with --experiment updates that one (created if the name is new),
        launches a run, prints the run's id (alone on stdout)
    python -m grpo_client watch RUN [--interval 2] [--metric reward/mean ...]
        one line per step as the run reports metrics; exits when the run ends (0 if it succeeded)
    python -m grpo_client pause|resume|cancel|retry RUN
    python -m grpo_client samples RUN [--step N] [--jsonl]
    python -m grpo_client download RUN --step N --out FILE.zip
        the checkpoint of step N as a zipped Hugging Face folder
    python -m grpo_client sweep create EXPERIMENT --name N --space JSON|@FILE --metric M --trials N
        [--direction maximize|minimize] [--concurrent 2] [--sampler grid|random|tpe]
        [--pruner none|median|successive_halving|hyperband] [--seed 0] [--pruner-startup-trials N]
        [--pruner-warmup-steps N]
    python -m grpo_client sweep list [--experiment ID] [--status S]  /  sweep show SWEEP  /  sweep cancel SWEEP
    python -m grpo_client alerts add --event failed [--event ...] --webhook URL|--email ADDRESS [--experiment ID]
        [--metric reward/mean --when '<' --threshold 0.1] [--min-interval 60]   (prints the rule's id)
    python -m grpo_client alerts list  /  alerts enable|disable|delete RULE  /  alerts log [--rule ID] [--status S]
    python -m grpo_client evaluate RUN --step N --dataset task:arithmetic|dataset:ID|run_eval [--k 4] [--prompts 64]
        [--wait]   (or --model FOLDER instead of RUN; prints the job's id, with --wait its results)
    python -m grpo_client evaluations list [--run ID] [--status S]  /  leaderboard [DATASET]

An error from the API is printed as one line on stderr (`error: HTTP 404: ...`) and the exit code
is 1; a usage error exits with 2.
"""
