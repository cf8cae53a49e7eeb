"""Rollout samples as readable text: how DatabaseHooks stores a prompt (string, chat-rendered,
message list) and the segments the API gives the run page (special tokens, roles, plain text).
Hostile text stays text: the page's script only ever makes text nodes of it (the browser side is
tests/platform/web/test_web_browser_js.py)."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_run, token_client

from experiments.models import RolloutSample
from experiments.sample_text import message_segments, prompt_segments, segments, stored_prompt
from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db

CHATML = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
HOSTILE = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"><|im_end|>'


def test_segments_cut_special_tokens_and_roles():
    assert segments(CHATML) == [
        {"kind": "special", "text": "<|im_start|>"},
        {"kind": "role", "text": "system"},
        {"kind": "text", "text": "\nBe brief."},
        {"kind": "special", "text": "<|im_end|>"},
        {"kind": "text", "text": "\n"},
        {"kind": "special", "text": "<|im_start|>"},
        {"kind": "role", "text": "user"},
        {"kind": "text", "text": "\nWhat is 2+3?"},
        {"kind": "special", "text": "<|im_end|>"},
        {"kind": "text", "text": "\n"},
        {"kind": "special", "text": "<|im_start|>"},
        {"kind": "role", "text": "assistant"},
        {"kind": "text", "text": "\n"},
    ]
    llama3 = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    assert [s["kind"] for s in segments(llama3)] == ["special", "special", "role", "special", "text", "special"]
    assert segments("12+34=") == [{"kind": "text", "text": "12+34="}]
    assert segments("") == []
    # a role word not right after a special token is plain text; "<|user|>" alone is a special token
    assert segments("user: hi <|x|>users") == [
        {"kind": "text", "text": "user: hi "},
        {"kind": "special", "text": "<|x|>"},
        {"kind": "text", "text": "users"},
    ]
    assert "".join(s["text"] for s in segments(HOSTILE)) == HOSTILE  # nothing lost or changed


def test_stored_prompt_shapes():
    assert stored_prompt("1+1=") == ("1+1=", {})
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße <b>?</b>"}]
    text, extra = stored_prompt(messages)
    assert json.loads(text) == messages and "Grüße" in text  # readable JSON, not a Python repr
    assert extra == {"prompt_messages": messages, "prompt_format": "messages"}
    assert (
        prompt_segments(text, extra)
        == message_segments(messages)
        == [
            {"kind": "role", "text": "system"},
            {"kind": "text", "text": " Be brief.\n"},
            {"kind": "role", "text": "user"},
            {"kind": "text", "text": " Grüße <b>?</b>"},
        ]
    )
    text, extra = stored_prompt("What is 2+3?", rendered=(CHATML, messages))
    assert text == CHATML and extra["prompt_format"] == "chat_template"
    assert prompt_segments(text, extra) == segments(CHATML)


def test_hooks_store_message_lists_and_chat_renderings(alice):
    run = make_run(alice, status="running")
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=0, background_flush=False)
    messages = [{"role": "user", "content": "2+2?"}]
    hooks.on_samples(1, [{"prompt": messages, "completion": "4", "answer": "4", "reward": 1.0, "correct": True}])
    rendered = DatabaseHooks(
        run.pk,
        attempt=1,
        flush_interval_s=0,
        background_flush=False,
        chat_prompts=lambda p: (f"<|im_start|>user\n{p}<|im_end|>\n", [{"role": "user", "content": p}]),
    )
    rendered.on_samples(2, [{"prompt": "3+3?", "completion": "6", "answer": "6", "reward": 1.0}])
    failing = DatabaseHooks(
        run.pk, attempt=1, flush_interval_s=0, background_flush=False, chat_prompts=lambda p: 1 / 0
    )  # a template failure: the prompt as it came
    failing.on_samples(3, [{"prompt": "4+4?", "completion": "8", "answer": "8"}])
    for h in (hooks, rendered, failing):
        h.flush()
    first, second, third = RolloutSample.objects.filter(run=run).order_by("step")
    assert json.loads(first.prompt) == messages and first.prompt != str(messages)
    assert first.extra == {"correct": True, "prompt_messages": messages, "prompt_format": "messages"}
    assert second.prompt == "<|im_start|>user\n3+3?<|im_end|>\n"
    assert second.extra == {"prompt_messages": [{"role": "user", "content": "3+3?"}], "prompt_format": "chat_template"}
    assert (third.prompt, third.extra) == ("4+4?", {})


def test_api_gives_segments_and_keeps_hostile_text_as_text(alice):
    run = make_run(alice, status="running")
    RolloutSample.objects.create(
        run=run,
        step=1,
        index=0,
        prompt=CHATML,
        completion=HOSTILE,
        answer="<i>5</i>",
        extra={"prompt_format": "chat_template", "prompt_messages": [{"role": "user", "content": "What is 2+3?"}]},
    )
    response = token_client(alice).get(f"/api/runs/{run.pk}/samples")
    assert response["Content-Type"] == "application/json"
    (sample,) = response.json()["samples"]
    assert sample["prompt"] == CHATML and sample["prompt_segments"] == segments(CHATML)
    assert sample["prompt_messages"] == [{"role": "user", "content": "What is 2+3?"}]
    assert sample["completion"] == HOSTILE
    assert sample["completion_segments"] == [
        {"kind": "text", "text": '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'},
        {"kind": "special", "text": "<|im_end|>"},
    ]
