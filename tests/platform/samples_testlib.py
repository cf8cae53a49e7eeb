"""Hand-made rollout samples for the rollout browser's tests (test_rollout_browser*.py)."""

from __future__ import annotations

import hashlib

from experiments.models import RolloutSample

PROMPTS = ["What is 2+2?", "Name a colour."]
G = 2  # completions per prompt


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fill(run, steps=(1, 2, 3)) -> None:
    """Per step: 2 prompts x G=2 completions (index = group * G + generation); reward = generation,
    advantage = generation - 0.5; completion "s<step>g<group>n<generation>"; plus one eval sample."""
    rows = []
    for step in steps:
        for index in range(len(PROMPTS) * G):
            group, generation = divmod(index, G)
            rows.append(
                RolloutSample(
                    run=run,
                    step=step,
                    index=index,
                    group=group,
                    prompt=PROMPTS[group],
                    prompt_hash=prompt_hash(PROMPTS[group]),
                    completion=f"s{step}g{group}n{generation}",
                    answer="4",
                    reward=float(generation),
                    advantage=generation - 0.5,
                    extra={"generation": generation},
                )
            )
        rows.append(
            RolloutSample(
                run=run,
                step=step,
                index=0,
                kind="eval",
                prompt="eval prompt",
                prompt_hash=prompt_hash("eval prompt"),
                completion=f"eval s{step}",
                reward=1.0,
            )
        )
    RolloutSample.objects.bulk_create(rows)
