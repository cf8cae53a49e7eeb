"""The host side of the turn loop: a batch of episodes, one per sequence, each talking to the run's
environment (`trainers.envs`) while the engine (`engine.batching.generate_paged` with turns)
decodes them all together.

When a sequence ends an assistant turn, `Episodes.on_turn_end` decodes the turn's text, asks the
environment for its reply (`Environment.step`), and returns the reply's token ids, rendered with
the chat template (`encoding.encode_reply`), for the sampler to prefill; or None to end the
episode. An episode ends when the environment says done, at `env.max_turns` assistant turns, when
the next reply would not fit in the token budget (`max_total_tokens`), or when the environment
raises (`env_error`, with the message: the run goes on). `Episodes.finish` closes the episodes the
budget cut mid-turn and returns what scoring and display need.

A reply is bounded before it is tokenized: its messages' text together keeps at most
`max_reply_chars` characters (MAX_REPLY_CHARS by default); the rest is cut and the last kept message
ends with a note saying how much was cut (`bound_reply`). An environment that answers with a
megabyte costs one slice, not a tokenizer pass over all of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from trainers.data.chat_template import conversation
from trainers.data.encoding import encode_reply
from trainers.envs.base import Environment, EpisodeState

END_DONE, END_MAX_TURNS, END_MAX_TOKENS, END_ERROR = "done", "max_turns", "max_total_tokens", "env_error"
END_REASONS = (END_DONE, END_MAX_TURNS, END_MAX_TOKENS, END_ERROR)
ERROR_CHARS = 500  # an environment's error message is kept up to this many characters
MAX_REPLY_CHARS = 16_384  # an environment's reply (its messages' text together) is cut beyond this


def bound_reply(messages: list[dict[str, str]], limit: int) -> tuple[list[dict[str, str]], int]:
    """`messages` with their text together cut to `limit` characters, and how many were cut (0: the
    messages as given). The message where the cut falls ends with a note saying so; the messages after
    it are dropped. Content that is not text is left for the encoder to refuse."""

    def is_text(message: Any) -> bool:
        return isinstance(message, dict) and isinstance(message.get("content"), str)

    if sum(len(m["content"]) for m in messages if is_text(m)) <= limit:
        return messages, 0
    kept: list[dict[str, str]] = []
    room, cut = limit, 0
    for message in messages:
        if not is_text(message):
            kept.append(message)
            continue
        content = message["content"]
        if room <= 0:
            cut += len(content)
            continue
        if len(content) > room:
            cut += len(content) - room
            content = content[:room]
        room -= len(content)
        kept.append({**message, "content": content})
    note = f"\n[reply cut: {cut} more characters over the limit of {limit}]"
    last = next((i for i in range(len(kept) - 1, -1, -1) if is_text(kept[i])), None)
    if last is None:
        kept.append({"role": next(m["role"] for m in messages if is_text(m)), "content": note.lstrip()})
    else:
        kept[last] = {**kept[last], "content": kept[last]["content"] + note}
    return kept, cut


@dataclasses.dataclass
class Episode:
    """One sequence's episode: its conversation, its turns for display and what it earned."""

    state: EpisodeState
    history: list[dict[str, str]]  # the conversation rendered so far (chat runs)
    prompt: Any = None  # what the model saw first: the environment's reset (text or messages)
    turns: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    turn_start: int = 0  # completion index where the current assistant turn began
    reward_parts: dict[str, float] = dataclasses.field(default_factory=dict)
    tool_calls: int = 0
    tool_errors: int = 0
    end_reason: str | None = None
    error: str | None = None

    @property
    def final_text(self) -> str:
        """The last assistant turn's text: what the run's reward functions score."""
        return next((t["text"] for t in reversed(self.turns) if t["role"] == "assistant"), "")

    @property
    def text(self) -> str:
        """The whole episode after the prompt, each turn's text on its own line."""
        return "\n".join(t["text"] for t in self.turns)

    def display(self, env_name: str) -> dict[str, Any]:
        """The keys a multi-turn sample adds to its display dict (`Rollout.samples`)."""
        out = {
            "env": env_name,
            "turns": [dict(t) for t in self.turns],
            "reward_parts": dict(self.reward_parts),
            "end_reason": self.end_reason,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
        }
        if self.prompt is not None:
            out["prompt"] = self.prompt  # replaces the example's prompt in the sample: a worked example, a game's rules
        if self.error is not None:
            out["error"] = self.error
        return out


class Episodes:
    """The episodes of one generation call's rows (row i plays `examples[i]`)."""

    def __init__(
        self,
        env: Environment,
        tokenizer: Any,
        examples: list[dict[str, Any]],
        prompts: list[Any],
        *,
        chat: bool,
        system_prompt: str | None,
        max_turns: int,
        max_total_tokens: int,
        max_reply_chars: int = MAX_REPLY_CHARS,
    ) -> None:
        self.env, self.tokenizer, self.chat = env, tokenizer, chat
        self.max_turns, self.max_total_tokens = max_turns, max_total_tokens
        self.max_reply_chars = max_reply_chars
        self.eos_ids = frozenset(getattr(tokenizer, "eos_ids", (tokenizer.eos_id,)))
        self.episodes = [
            Episode(
                state=EpisodeState(example=example),
                history=conversation(prompt, system_prompt) if chat else [],
                prompt=prompt,
            )
            for example, prompt in zip(examples, prompts)
        ]

    def on_turn_end(self, row: int, step: int, tokens: np.ndarray) -> np.ndarray | None:
        """`generate.TurnEnd`: row `row` ended an assistant turn at token step - 1."""
        episode = self.episodes[row]
        turn_ids = tokens[episode.turn_start : step]
        text = self.tokenizer.decode_completion(turn_ids)
        last = int(turn_ids[-1]) if len(turn_ids) else None
        if last not in self.eos_ids and not any(text.endswith(stop) for stop in self.env.stop_strings):
            return np.zeros(0, np.int32)  # the stop tokens came without their stop string: the turn goes on
        episode.turns.append({"role": "assistant", "text": text, "tokens": int(len(turn_ids))})
        episode.state.turn += 1
        try:
            result = self.env.step(episode.state, text)
            unknown = sorted(set(result.reward_parts) - set(self.env.reward_parts))
            if unknown:
                raise ValueError(f"reward parts {unknown} are not declared in {type(self.env).__name__}.reward_parts")
        except Exception as error:  # noqa: BLE001 - an environment's bug fails its episode, not the run
            return self._end(episode, END_ERROR, f"{type(error).__name__}: {error}"[:ERROR_CHARS])
        for name, value in result.reward_parts.items():
            episode.reward_parts[name] = episode.reward_parts.get(name, 0.0) + float(value)
        episode.tool_calls += result.tool_calls
        episode.tool_errors += result.tool_errors
        if result.done:
            return self._end(episode, END_DONE)
        if episode.state.turn >= self.max_turns:
            return self._end(episode, END_MAX_TURNS)
        ended_by = self.tokenizer.token_text(last) if self.chat and last in self.eos_ids else ""
        episode.history.append({"role": "assistant", "content": text})
        try:
            messages, _ = bound_reply(result.messages, self.max_reply_chars)  # before any tokenizing
            reply_ids = np.asarray(
                encode_reply(self.tokenizer, episode.history, messages, chat=self.chat, ended_by=ended_by), np.int32
            )
        except (ValueError, KeyError, TypeError) as error:
            return self._end(episode, END_ERROR, f"the reply could not be rendered: {error}"[:ERROR_CHARS])
        if step + len(reply_ids) >= self.max_total_tokens:
            return self._end(episode, END_MAX_TOKENS)
        episode.history.extend(messages)
        for message in messages:
            episode.turns.append({"role": message["role"], "text": message["content"], "tokens": 0})
        if messages:  # the reply's tokens (template markers included) are counted on its last message
            episode.turns[-1]["tokens"] = int(len(reply_ids))
        episode.turn_start = step + len(reply_ids)
        return reply_ids

    def finish(self, tokens: np.ndarray, mask: np.ndarray, first_row: int = 0) -> list[Episode]:
        """Close the episodes of rows first_row .. first_row + len(tokens) - 1 that were still going when
        generation stopped: the budget cut them mid-turn (their last turn is kept as written).
        tokens / mask [rows, N]: those rows of the generation. Returns their episodes."""
        episodes = self.episodes[first_row : first_row + len(tokens)]
        for row, episode in enumerate(episodes):
            if episode.end_reason is None:
                end = int(mask[row].sum())
                turn_ids = tokens[row, episode.turn_start : end]
                episode.turns.append(
                    {
                        "role": "assistant",
                        "text": self.tokenizer.decode_completion(turn_ids),
                        "tokens": int(len(turn_ids)),
                    }
                )
                episode.end_reason = END_MAX_TOKENS
        return episodes

    @staticmethod
    def _end(episode: Episode, reason: str, error: str | None = None) -> None:
        episode.end_reason, episode.error = reason, error
        return None


def episode_metrics(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """env/* metrics of a rollout's episodes (their display dicts): turns, tool calls and errors per
    episode, the share of episodes that used a tool, and how episodes ended."""
    if not episodes:
        return {}
    turns = [sum(t["role"] == "assistant" for t in e["turns"]) for e in episodes]
    out = {
        "env/turns_mean": float(np.mean(turns)),
        "env/tool_calls_mean": float(np.mean([e["tool_calls"] for e in episodes])),
        "env/tool_errors_mean": float(np.mean([e["tool_errors"] for e in episodes])),
        "env/tool_use_fraction": float(np.mean([e["tool_calls"] > 0 for e in episodes])),
    }
    for reason in (END_MAX_TURNS, END_MAX_TOKENS, END_ERROR):
        key = "env/error_fraction" if reason == END_ERROR else f"env/{reason}_fraction"
        out[key] = float(np.mean([e["end_reason"] == reason for e in episodes]))
    return out
