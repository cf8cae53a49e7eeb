#!/usr/bin/env python3
"""The rollout browser at 10^6 samples: one run holding N rollout samples (default 10^6: 2,000 steps
x 500 completions, G = 5, so 100 groups a step; 20,000 distinct prompts, each seen at 10 steps) in
a scratch database, written by the database itself (generate_series / a recursive CTE). Then the
browser's typical requests through Django's test Client with a token (routing, authentication, the
view, JSON encoding), each the median of --repeats:

  first_page         GET /api/runs/<id>/samples?kind=train&limit=50
  deep_keyset_page   the page after a sample of step 1,900 (?after=<id>): no OFFSET
  filtered_deep      ?step_min=1500&reward_min=0.8&advantage_min=0.2 and the page after it
  text_search        ?q=needle (a word in 1 completion of 997)
  text_search_none   ?q=<absent word>: on PostgreSQL the trigram indexes (migration 0010) answer
                     for the whole run; on SQLite no index serves text, so a request reads at most
                     sample_query.SEARCH_SCAN_ROWS rows (50,000) and says how far it got
  text_search_next   the page after text_search's (a window counted after a cursor)
  rare_reward        ?reward_min=1&advantage_max=0 (no sample has both): the same bounded window
  group              ?step=1234&group=42 (its 5 completions)
  prompt_across      ?prompt_hash=<one prompt> (its 50 completions over 10 steps)
  export_page        the first 1,000 lines of GET /api/runs/<id>/samples.jsonl (one chunk)

Each is printed in ms with its ratio against the anchor (300 ms; target <= 1), then EXPLAIN of the
main queries (they must walk the (run, kind, step, index) or (run, prompt_hash, step) index).

    .venv/bin/python bench/sample_browser_bench.py [--backend sqlite|postgresql] [--samples 1000000]
        [--database-url postgres://...] [--reload] [--repeats 5]

SQLite: a scratch file under var/bench-samples/. PostgreSQL: --database-url, else BENCH_DATABASE_URL,
else postgres://postgres@127.0.0.1:5432/grpo_bench_samples (created and migrated; the run is kept
between invocations, --reload writes it again).
Last line: `worst_ms=X ratio_vs_anchor=Y` over all the requests.

Measured (this machine, 2 shared cores, 10^6 samples, median of 5): PostgreSQL 15: first page 6 ms,
deep keyset page 7, filtered deep 6-8, text search 74 (needle and absent alike: one 50,000-row
window), group 6, prompt across steps 7, an export chunk of 1,000 lines 21 ms: worst 74 ms, ratio 0.25.
SQLite: 3-5 ms for the indexed requests, text search 23-27 ms, export chunk 19 ms: worst 27 ms,
ratio 0.09. Before the search window an absent word read the whole run: 1,088 ms on PostgreSQL.
With PostgreSQL's trigram indexes (measured with five other jobs on the machine, load
average 6-9): text search 19.5 ms, an absent word 13.2 ms over the whole run (no window to page
through), the next page 24 ms; worst request 56 ms (the export chunk), ratio 0.19.
With the window for reward/advantage filters too and its end counted from the cursor's step
(re-measured, other work on the machine): PostgreSQL filtered deep 24 ms and its next page 28 (was
124), text search next page 76, rare reward 34 (352 before the window): worst 83 ms, ratio 0.28;
SQLite filtered next page 9 ms, text search next 27, rare reward 17: worst 27 ms, ratio 0.09.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import bench_django  # bench/ is first on sys.path for a script run from it

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANCHOR_MS = 300.0
SAMPLES_PER_STEP = 500
GENERATIONS = 5
DISTINCT_PROMPTS = 20_000
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/grpo_bench_samples"
SQLITE_DIR = os.path.join(ROOT, "var", "bench-samples")
EXPERIMENT = "bench-samples"

# Row i (0-based) of the run: step = i / 500, index = i % 500, group = index / 5; prompt p =
# (step * 100 + group) % 20000; reward = ((step * 31 + index * 17) % 11) / 10; advantage = reward - 0.5;
# "needle" in the completion of every 997th row.
FILL = {
    "postgresql": """
        INSERT INTO {table} (run_id, kind, step, index, "group", prompt_hash, prompt, completion, answer,
                             reward, advantage, extra)
        SELECT %(run)s, 'train', i / {per_step}, i %% {per_step}, (i %% {per_step}) / {g},
               lpad(p::text, 32, '0'),
               'Question ' || p || ': what is ' || p || ' plus ' || (p %% 97) || '? Answer with the number only.',
               'Let me think step by step. ' || p || ' plus ' || (p %% 97) || ' is '
                 || (p + p %% 97 + i %% 3) || CASE WHEN i %% 997 = 0 THEN ' needle' ELSE '' END
                 || '. So the answer is ' || (p + p %% 97 + i %% 3) || '.',
               (p + p %% 97)::text, r, r - 0.5, '{{}}'::jsonb
        FROM (SELECT i, ((i / {per_step}) * ({per_step} / {g}) + (i %% {per_step}) / {g}) %% {prompts} AS p,
                     (((i / {per_step}) * 31 + (i %% {per_step}) * 17) %% 11) / 10.0 AS r
              FROM generate_series(0, %(n)s - 1) AS i) AS rows""",
    "sqlite": """
        INSERT INTO {table} (run_id, kind, step, "index", "group", prompt_hash, prompt, completion, answer,
                             reward, advantage, extra)
        WITH RECURSIVE ids(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM ids WHERE i + 1 < %(n)s),
             rows AS (SELECT i, ((i / {per_step}) * ({per_step} / {g}) + (i %% {per_step}) / {g}) %% {prompts} AS p,
                             (((i / {per_step}) * 31 + (i %% {per_step}) * 17) %% 11) / 10.0 AS r FROM ids)
        SELECT %(run)s, 'train', i / {per_step}, i %% {per_step}, (i %% {per_step}) / {g},
               printf('%%032d', p),
               'Question ' || p || ': what is ' || p || ' plus ' || (p %% 97) || '? Answer with the number only.',
               'Let me think step by step. ' || p || ' plus ' || (p %% 97) || ' is '
                 || (p + p %% 97 + i %% 3) || CASE WHEN i %% 997 = 0 THEN ' needle' ELSE '' END
                 || '. So the answer is ' || (p + p %% 97 + i %% 3) || '.',
               CAST(p + p %% 97 AS TEXT), r, r - 0.5, '{{}}'
        FROM rows""",
}


def setup_django(backend: str, database_url: str) -> None:
    bench_django.setup_django(backend, database_url, SQLITE_DIR)


def bench_run():
    """The bench user's token and its one run (created when missing)."""
    from django.contrib.auth import get_user_model

    from api.models import ApiToken
    from experiments.models import Experiment, Run
    from trainers.config import load_config

    user, _ = get_user_model().objects.get_or_create(username="bench")
    experiment = Experiment.objects.filter(owner=user, name=EXPERIMENT).first()
    if experiment is None:
        experiment = Experiment(owner=user, name=EXPERIMENT)
        experiment.set_config(load_config(os.path.join(ROOT, "configs", "w1.yaml")).to_dict(), user=user)
    run = Run.objects.filter(experiment=experiment).order_by("-pk").first()
    if run is None:
        run = Run.objects.create(
            experiment=experiment,
            config=experiment.config,
            status="succeeded",
            attempt=1,
            max_steps=int(experiment.config["train"]["max_steps"]),
        )
    return ApiToken.issue(user).key, run


def fill(run, n: int) -> float:
    """Write n samples for `run` (replacing its samples); returns seconds."""
    from django.db import connection, transaction

    from experiments.models import RolloutSample

    table = RolloutSample._meta.db_table
    sql = FILL[connection.vendor].format(
        table=table, per_step=SAMPLES_PER_STEP, g=GENERATIONS, prompts=DISTINCT_PROMPTS
    )
    t0 = time.perf_counter()
    with transaction.atomic():
        RolloutSample.objects.filter(run=run).delete()
        with connection.cursor() as cursor:
            cursor.execute(sql, {"run": run.pk, "n": n})
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}" if connection.vendor == "postgresql" else "ANALYZE")
    return time.perf_counter() - t0


def timed(repeats: int, request) -> tuple[float, object]:
    """Median ms of `repeats` calls of request(), after one warm-up call; and the last result."""
    result = request()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = request()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reload", action="store_true")
    args = parser.parse_args()
    setup_django(args.backend, args.database_url)

    from django.test import Client

    from experiments import sample_query
    from experiments.models import RolloutSample

    key, run = bench_run()
    stored = RolloutSample.objects.filter(run=run).count()
    if args.reload or stored != args.samples:
        print(f"writing {args.samples} samples ... ", end="", flush=True)
        print(f"{fill(run, args.samples):.1f} s")
    client = Client(headers={"authorization": f"Token {key}"})
    url = f"/api/runs/{run.pk}/samples"
    last_step = (args.samples - 1) // SAMPLES_PER_STEP
    deep_step, group_step = min(1900, last_step), min(1234, last_step)
    deep_id = RolloutSample.objects.filter(run=run, step=deep_step, index=0).values_list("pk", flat=True).first()
    prompt = (
        RolloutSample.objects.filter(run=run, step=group_step, index=0).values_list("prompt_hash", flat=True).first()
    )

    def get(params: dict):
        def request():
            response = client.get(url, params)
            assert response.status_code == 200, response.content[:300]
            return response.json()

        return request

    def export_page():
        response = client.get(f"{url}.jsonl")
        assert response.status_code == 200
        lines = 0
        for chunk in response.streaming_content:
            lines += chunk.count(b"\n")
            if lines >= sample_query.EXPORT_CHUNK:
                break
        response.close()
        return lines

    filtered = {"step_min": 1500, "reward_min": 0.8, "advantage_min": 0.2, "limit": 50}
    first_filtered = get(filtered)()
    first_search = get({"q": "needle", "limit": 50})()
    requests = {
        "first_page": get({"kind": "train", "limit": 50}),
        "deep_keyset_page": get({"after": deep_id, "limit": 50}),
        "filtered_deep": get(filtered),
        "filtered_deep_next": get({**filtered, "after": first_filtered["next_after"] or ""}),
        "text_search": get({"q": "needle", "limit": 50}),
        "text_search_none": get({"q": "haystack-absent", "limit": 50}),
        "text_search_next": get({"q": "needle", "limit": 50, "after": first_search["next_after"] or ""}),
        "rare_reward": get({"reward_min": 1, "advantage_max": 0, "limit": 50}),
        "group": get({"step": group_step, "group": 42}),
        "prompt_across": get({"prompt_hash": prompt, "limit": 100}),
        "export_page": export_page,
    }
    print(f"{args.backend}: run {run.pk}, {args.samples} samples, anchor {ANCHOR_MS:.0f} ms")
    results = {}
    for name, request in requests.items():
        ms, body = timed(args.repeats, request)
        results[name] = ms
        rows = body if isinstance(body, int) else len(body["samples"])
        print(f"  {name:20s} {ms:9.1f} ms  ratio_vs_anchor={ms / ANCHOR_MS:.3f}  ({rows} samples)")

    print("EXPLAIN:")
    f = sample_query.SampleFilters
    plans = {
        "first_page": sample_query.filtered(run, f()).order_by("step", "index", "id")[:51],
        "filtered_deep": sample_query.filtered(run, f(step_min=1500, reward_min=0.8, advantage_min=0.2)).order_by(
            "step", "index", "id"
        )[:51],
        "deep_keyset_page": sample_query._after(sample_query.filtered(run, f()), deep_step, 0, deep_id).order_by(
            "step", "index", "id"
        )[:51],
        "group": sample_query.filtered(run, f(step=group_step, group=42)).order_by("step", "index", "id")[:51],
        "prompt_across": sample_query.filtered(run, f(prompt_hash=prompt)).order_by("step", "index", "id")[:101],
    }
    for name, qs in plans.items():
        print(f"  {name}:")
        print("    " + qs.explain().replace("\n", "\n    "))
    worst = max(results.values())
    print(f"worst_ms={worst:.1f} ratio_vs_anchor={worst / ANCHOR_MS:.3f}")


if __name__ == "__main__":
    main()
