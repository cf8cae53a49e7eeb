"""The rollout sample endpoints' shapes (api/sample_views.py): one step's samples, a browsed page
and the filters. See api/contract.py for how endpoints declare them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, RootModel

from api.contract import Shape
from api.inputs import Query, WholeNumber


class Segment(Shape):
    model_config = ConfigDict(extra="allow")
    text: str


class EpisodeTurn(Shape):
    role: str = Field(
        description='"assistant" for a turn the model wrote, else the environment\'s reply role ("tool", "user")'
    )
    label: str = Field(
        description='how the browser names the turn: "tool call" (an assistant turn holding '
        '<tool_call>), "tool response" (role tool), else its role'
    )
    text: str
    tokens: int | None = Field(description="the turn's tokens in the sequence")


class Episode(Shape):
    """A multi-turn sample's episode (experiments.sample_episodes)."""

    env: str | None
    turns: list[EpisodeTurn]
    reward_parts: dict[str, float | str | None] = Field(
        description='raw reward-function scores and the environment\'s parts; a non-finite one as "NaN", '
        '"Infinity" or "-Infinity"'
    )
    end_reason: str | None = Field(description="done, max_turns, max_total_tokens or env_error")
    error: str | None = Field(description="the environment's error (end_reason env_error)")
    tool_calls: int | None
    tool_errors: int | None


class CodeTestResult(Shape):
    """One unit test the code_tests reward ran on a completion (experiments.reward_details)."""

    test: str = Field(description="the test statement (at most 500 characters: a longer one is cut, ending in …)")
    passed: bool | None = Field(description="whether it passed; null where the trainer stored no true/false")
    reason: str = Field(description='why it failed ("" when it passed), at most 300 characters')
    checked: str = Field(
        description='"outside": its expression\'s value was compared outside the sandbox, where the code cannot '
        'forge the result; "inside": a statement that ran to its end inside; "" where not stored'
    )


class JudgeVerdict(Shape):
    """The judge reward's verdict on a completion (experiments.reward_details.judge)."""

    mode: str = Field(description='the judge\'s judge.mode: "yes_no" or "number" ("" when not stored)')
    score: float | None = Field(description="the score it gave, 0 to 1; null where none was stored")
    verdict: str = Field(
        description='yes_no: "yes" or "no"; number: what the judge wrote (at most 300 characters, a longer '
        "text cut, ending in …)"
    )
    reason: str = Field(description='why the score is 0 or clipped ("" when it is not), at most 300 characters')


class Sample(Shape):
    index: int
    prompt: str
    prompt_messages: list[Any] | None
    prompt_segments: list[Segment]
    completion: str
    completion_segments: list[Segment]
    answer: str
    reward: float | None
    advantage: float | None
    truncated: bool | None = Field(None, description="the completion ran into rollout.max_new_tokens")
    in_loss: bool | None = Field(
        None,
        description="false: kept out of the loss (overlong filter, or a "
        "dynamic-sampling step that consumed its most prompts)",
    )
    overlong_penalty: float | None = Field(None, description="the soft overlong reward added (0 to -penalty)")
    episode: Episode | None = Field(
        None, description="a multi-turn sample's turns, reward parts and end reason; absent for a single-turn sample"
    )
    code_tests: list[CodeTestResult] | None = Field(
        None,
        description="the code_tests reward's unit tests run on this completion, in order; absent when it ran none",
    )
    judge: JudgeVerdict | None = Field(
        None, description="the judge reward's verdict on this completion; absent when no judge scored it"
    )


class Samples(Shape):
    steps: list[int]
    step: int | None
    samples: list[Sample]


class SampleFiltersQuery(Query):
    kind: Literal["train", "eval"] | None = Field(None, description="default train")
    step: WholeNumber | None = None
    step_min: WholeNumber | None = None
    step_max: WholeNumber | None = None
    group: WholeNumber | None = Field(None, description="one prompt's completions within `step` (needs step)")
    reward_min: float | None = None
    reward_max: float | None = None
    advantage_min: float | None = None
    advantage_max: float | None = None
    q: str | None = Field(None, description="text in the prompt or completion (case-insensitive)")
    prompt_hash: str | None = Field(None, description="32 hex digits: one prompt across steps")
    end_reason: Literal["done", "max_turns", "max_total_tokens", "env_error"] | None = Field(
        None, description="multi-turn episodes that ended so"
    )
    tool: Literal["yes", "no"] | None = Field(
        None, description="multi-turn episodes with (yes) or without (no) a tool call"
    )


class SamplesQuery(SampleFiltersQuery):
    """`step` alone (or nothing): one step's samples (Samples); any other parameter: a page (SamplePage)."""

    limit: WholeNumber | None = Field(None, ge=1, description="page size")
    after: WholeNumber | None = Field(None, ge=1, description="the page starts after this sample id")
    before: WholeNumber | None = Field(None, ge=1, description="the page ends before this sample id")


class BrowsedSample(Sample):
    id: int
    kind: Literal["train", "eval"]
    step: int
    group: int
    generation: int | None
    prompt_hash: str


class SamplePage(Shape):
    samples: list[BrowsedSample]
    next_after: int | None
    prev_before: int | None
    scanned_to_step: int | None = Field(
        None, description="where a text, reward or advantage search stopped reading (api/sample_views.py)"
    )
    limit: int


class SamplesAnswer(RootModel[Samples | SamplePage]):
    """One step's samples, or a browsed page (see SamplesQuery)."""
