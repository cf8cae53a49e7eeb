"""The `judge` reward's model side: a second Hugging Face model (the config's `judge` section) that
scores a step's completions together.

`load_judge(config)` loads it (weights, tokenizer, the verdict tokens) onto one device; the `Judge`
it returns is a batched reward, `judge(completions, examples) -> (scores [N], details)`, that the
rollout hands to `rewards.score_with_details` as the scorer of the name `judge`
(`RolloutSpec.scorers`). Each completion becomes one judge prompt (`data.judge_prompt.judge_prompt`,
rendered with the judge's chat template unless judge.chat_template is false), and:

  yes_no: one forward pass over the prompts in passes of up to judge.micro_batch_sequences rows
          (`shared_prefix_batches`): the G judge prompts of one example share everything before
          the completion, so that prefix runs once and its keys and values serve the G rows, whose
          remaining tokens run as one cached chunk after it (`transformer.shared_prefix_hidden`,
          as the log-prob passes share a group's prompt); the counts of rows and prefixes and the
          widths are bucketed (`encoding.bucket_width`): a few compiled shapes per run;
          score = p(yes) / (p(yes) + p(no)) of the next token, where p(yes) sums the probabilities
          of every token of the judge's vocabulary that spells "yes" in any case, with or without
          a leading space (`verdict_token_ids`, `judge_prompt.YES_WORDS`), and likewise "no".
  number: greedy generation of up to judge.max_new_tokens tokens by the rollout's engine
          (`engine.batching.generate_paged`), score = the first number written / judge.scale,
          clipped to [0, 1] (`judge_prompt.number_score`).

A prompt longer than judge.max_prompt_tokens scores 0, with the reason in its details.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainers.config import ExperimentConfig
from trainers.data.encoding import PROMPT_BUCKET_TOKENS, bucket_width
from trainers.data.judge_prompt import (
    DEFAULT_TEMPLATES,
    NO_WORDS,
    YES_WORDS,
    judge_prompt,
    number_score,
    yes_no_score,
)
from trainers.data.tokenizer import model_tokenizer
from trainers.engine.batching import EngineSettings, generate_paged
from trainers.errors import FieldError
from trainers.models.generate import SamplingParams, StaticGraph, cast_for_generation, eos_settings, static_graph
from trainers.models.hf_config import read_model_config
from trainers.models.hf_weights import load_pretrained
from trainers.models.transformer import shared_prefix_hidden

SPACE_MARKERS = "\u2581" + "".join(chr(256 + byte) for byte in b" \t\n\r\x0b\x0c") + " \t\n\r\x0b\x0c"
"""What a vocabulary writes before a word for the space or line break ahead of it: SentencePiece's
(Metaspace) "\u2581", the byte-level BPE alphabet's characters for the whitespace bytes ("\u0120" Ġ for
a space, "\u010a" Ċ for a newline, ...), and plain whitespace."""


def verdict_token_ids(
    tokenizer: Any, yes_words: tuple[str, ...] = YES_WORDS, no_words: tuple[str, ...] = NO_WORDS
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(yes ids, no ids): every token of `tokenizer`'s vocabulary (its `token_text` of each id) whose
    text, without its leading SPACE_MARKERS, equals one of `yes_words` (`no_words`) case-insensitively:
    "Yes", "\u2581Yes", "\u0120yes", "YES", ... all count, whichever a model writes after a newline or a
    space. Special tokens (BOS, EOS, PAD, UNK and every special added token) are left out, and so is any
    id found in both sets; each tuple ascending. Reading the vocabulary, rather than encoding the
    words, finds the bare "Yes" of a Metaspace tokenizer (whose encode("Yes") gives "\u2581Yes") and never
    an unknown-token id that spells nothing."""
    yes_set = {word.strip().casefold() for word in yes_words}
    no_set = {word.strip().casefold() for word in no_words}
    special_texts = set(tokenizer.special_texts)
    special_ids = {tokenizer.unk_id, tokenizer.bos_id, tokenizer.pad_id, *tokenizer.eos_ids}
    yes, no = set(), set()
    for token_id in range(tokenizer.vocab_size):
        text = tokenizer.token_text(token_id)
        if not text or text in special_texts or token_id in special_ids:
            continue
        word = text.lstrip(SPACE_MARKERS).casefold()
        if word in yes_set:
            yes.add(token_id)
        if word in no_set:
            no.add(token_id)
    both = yes & no
    return tuple(sorted(yes - both)), tuple(sorted(no - both))


@functools.partial(jax.jit, static_argnums=0)
def _verdict_logprobs(
    graph: StaticGraph,
    params: Any,
    prefix_tokens: jax.Array,
    prefix_valid: jax.Array,
    row_prefix: jax.Array,
    suffix_tokens: jax.Array,
    suffix_valid: jax.Array,
    yes_ids: jax.Array,
    no_ids: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Judge prompts as shared prefixes and their rows' suffixes: prefix_tokens, prefix_valid [P, Wp]
    (left-padded), row_prefix [R] (each row's prefix), suffix_tokens, suffix_valid [R, Ws]
    (right-padded, at least one token each) -> (log p(yes) [R], log p(no) [R]) of the token after each
    row's whole prompt: log of the summed probability of the yes (no) ids under the softmax at the
    row's last token. Each prefix runs once (`transformer.shared_prefix_hidden`)."""
    model = nnx.merge(graph.graphdef, params)
    _, suffix_hidden = shared_prefix_hidden(
        model,
        prefix_tokens,
        prefix_valid,
        lambda per_prefix: jnp.take(per_prefix, row_prefix, axis=0),
        suffix_tokens,
        suffix_valid,
    )
    last = jnp.sum(suffix_valid, axis=1, dtype=jnp.int32) - 1
    hidden = suffix_hidden[jnp.arange(suffix_tokens.shape[0]), last]  # [R, H]
    logprobs = jax.nn.log_softmax(model.logits(hidden), axis=-1)  # [R, V] float32
    yes = jax.scipy.special.logsumexp(logprobs[:, yes_ids], axis=-1)
    no = jax.scipy.special.logsumexp(logprobs[:, no_ids], axis=-1)
    return yes, no


def filled_rows(count: int, most: int) -> int:
    """The rows a pass of `count` is filled up to: the next of 1, 2, 3, 4, 6, 8, 12, 16, ... (the
    buckets of `bucket_width`: few compiled shapes, and two examples of G = 6 fill 12 rows, not 16),
    at most `most`."""
    return min(most, bucket_width(count * PROMPT_BUCKET_TOKENS, PROMPT_BUCKET_TOKENS) // PROMPT_BUCKET_TOKENS)


@dataclasses.dataclass(frozen=True)
class PrefixBatch:
    """One forward pass of the judge: `rows` (indices into the step's judge prompts), the distinct
    `prefixes` they share (token lists), each row's prefix (`row_prefix`, an index into `prefixes`)
    and what follows it (`suffixes`, at least one token each)."""

    rows: tuple[int, ...]
    prefixes: tuple[tuple[int, ...], ...]
    row_prefix: tuple[int, ...]
    suffixes: tuple[tuple[int, ...], ...]


def shared_prefix_batches(prompts: list[list[int]], keys: list[Any], batch_rows: int) -> list[PrefixBatch]:
    """The step's judge prompts (token lists) in passes of at most `batch_rows` rows, each group's
    shared prefix run once. Rows of one key (the judge prompt without its completion: one example's
    G completions) form a group; its prefix is the longest run of tokens its prompts all start with,
    short of each prompt's last token. Groups go shortest suffix first, so a pass pads its suffixes
    to rows like its own, and whole into a pass while they fit (a group over `batch_rows` is split,
    each part with its own copy of the prefix)."""
    groups: dict[Any, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    parts = []  # (longest suffix, first row, prefix, rows)
    for members in groups.values():
        shortest = min(len(prompts[i]) for i in members)
        length = 0
        while length < shortest - 1 and len({prompts[i][length] for i in members}) == 1:
            length += 1
        prefix = tuple(prompts[members[0]][:length])
        for first in range(0, len(members), batch_rows):
            rows = members[first : first + batch_rows]
            parts.append((max(len(prompts[i]) - length for i in rows), rows[0], prefix, rows))
    batches: list[PrefixBatch] = []
    current: list[tuple[tuple[int, ...], list[int]]] = []
    for _, _, prefix, rows in sorted(parts, key=lambda part: part[:2]):
        if current and sum(len(r) for _, r in current) + len(rows) > batch_rows:
            batches.append(_prefix_batch(prompts, current))
            current = []
        current.append((prefix, rows))
    if current:
        batches.append(_prefix_batch(prompts, current))
    return batches


def _prefix_batch(prompts: list[list[int]], parts: list[tuple[tuple[int, ...], list[int]]]) -> PrefixBatch:
    rows, row_prefix, suffixes = [], [], []
    for k, (prefix, members) in enumerate(parts):
        for i in members:
            rows.append(i)
            row_prefix.append(k)
            suffixes.append(tuple(prompts[i][len(prefix) :]))
    return PrefixBatch(tuple(rows), tuple(prefix for prefix, _ in parts), tuple(row_prefix), tuple(suffixes))


@dataclasses.dataclass
class Judge:
    """A loaded judge model and how it judges (the config's `judge` section); call it as a batched
    reward. Thread-safe: the asynchronous collector and the trainer's evaluation may both score."""

    graphdef: Any
    params: Any
    tokenizer: Any
    mode: str
    template: str
    chat: bool
    max_new_tokens: int
    scale: float
    max_prompt_tokens: int
    micro_batch_sequences: int
    device: Any
    yes_ids: tuple[int, ...] = ()
    no_ids: tuple[int, ...] = ()
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def __call__(self, completions: list[str], examples: list[dict]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """(scores [N] float32 in [0, 1], details per completion: {"mode", "score", "verdict"} plus, in
        number mode, "output" and "reason"; "reason" also where a prompt was too long)."""
        special = getattr(self.tokenizer, "special_texts", ())
        prompts = [judge_prompt(self.template, e, c, special) for c, e in zip(completions, examples)]
        ids = [self.tokenizer.encode_prompt(p, chat=self.chat) for p in prompts]
        keys = [judge_prompt(self.template, e, "", special) for e in examples]  # alike for one example's rows
        fits = [i for i, row in enumerate(ids) if len(row) <= self.max_prompt_tokens]
        scores = np.zeros(len(prompts), np.float32)
        details: list[dict[str, Any]] = [
            {
                "mode": self.mode,
                "score": 0.0,
                "verdict": "",
                "reason": f"judge prompt of {len(row)} tokens is over judge.max_prompt_tokens={self.max_prompt_tokens}",
            }
            for row in ids
        ]
        if fits:
            with self._lock, jax.default_device(self.device):
                rows = [ids[i] for i in fits]
                judged = self._yes_no(rows, [keys[i] for i in fits]) if self.mode == "yes_no" else self._number(rows)
                for i, (score, detail) in zip(fits, judged):
                    scores[i], details[i] = score, {"mode": self.mode, "score": score, **detail}
        return scores, details

    def _padded(self, rows: list, left: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """rows left- (or right-) padded to the bucketed width of the longest: (tokens [R, W] int32,
        valid [R, W] bool); an empty prefix still gets one (invalid) column."""
        longest = max(1, max(len(r) for r in rows))
        width = min(bucket_width(longest, PROMPT_BUCKET_TOKENS), self.max_prompt_tokens)
        tokens = np.full((len(rows), width), self.tokenizer.pad_id, np.int32)
        valid = np.zeros((len(rows), width), bool)
        for k, row in enumerate(rows):
            columns = slice(width - len(row), width) if left else slice(0, len(row))
            tokens[k, columns] = row
            valid[k, columns] = True
        return tokens, valid

    def _yes_no(self, rows: list[list[int]], keys: list[Any]) -> list[tuple[float, dict[str, Any]]]:
        """One forward pass per `shared_prefix_batches` pass of at most judge.micro_batch_sequences
        rows, each group's shared prefix run once; rows and prefixes filled up with copies of the first
        to a bucketed count (`filled_rows`), widths bucketed (few compiled shapes); score = p(yes) /
        (p(yes) + p(no))."""
        yes_ids, no_ids = jnp.asarray(self.yes_ids), jnp.asarray(self.no_ids)
        out: list[tuple[float, dict[str, Any]]] = [(0.0, {})] * len(rows)
        for batch in shared_prefix_batches(rows, keys, self.micro_batch_sequences):
            prefixes, suffixes, row_prefix = list(batch.prefixes), list(batch.suffixes), list(batch.row_prefix)
            prefixes += [prefixes[0]] * (filled_rows(len(prefixes), self.micro_batch_sequences) - len(prefixes))
            suffixes += [suffixes[0]] * (filled_rows(len(suffixes), self.micro_batch_sequences) - len(suffixes))
            row_prefix += [row_prefix[0]] * (len(suffixes) - len(row_prefix))
            prefix_tokens, prefix_valid = self._padded(prefixes, left=True)
            suffix_tokens, suffix_valid = self._padded(suffixes, left=False)
            yes, no = _verdict_logprobs(
                static_graph(self.graphdef),
                self.params,
                prefix_tokens,
                prefix_valid,
                np.asarray(row_prefix, np.int32),
                suffix_tokens,
                suffix_valid,
                yes_ids,
                no_ids,
            )
            yes, no = np.asarray(yes), np.asarray(no)
            for k, i in enumerate(batch.rows):
                score = yes_no_score(float(yes[k]), float(no[k]))
                verdict = {"verdict": "yes" if score >= 0.5 else "no", "logprob_yes": float(yes[k])}
                out[i] = (score, {**verdict, "logprob_no": float(no[k])})
        return out

    def _number(self, rows: list[list[int]]) -> list[tuple[float, dict[str, Any]]]:
        """Greedy generation by the engine, judge.micro_batch_sequences decode slots; the first number
        of each output / judge.scale."""
        tokens, valid = self._padded(rows)
        sampling = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0, **eos_settings(self.tokenizer))
        result, _ = generate_paged(
            self.graphdef,
            self.params,
            tokens,
            valid,
            jax.random.key(0),  # greedy: the draws are not read
            sampling,
            EngineSettings(num_slots=min(self.micro_batch_sequences, len(rows))),
        )
        out = []
        for row, mask in zip(result.tokens, result.mask):
            output = self.tokenizer.decode_completion(row[mask])
            score, reason = number_score(output, self.scale)
            out.append((score, {"verdict": output.strip(), "output": output, "reason": reason}))
        return out


def judge_device(config: ExperimentConfig) -> Any:
    """The device that holds the judge: judge.device, else the first of mesh.rollout_devices, else this
    process's first device (each process of a multi-process run holds its own judge). FieldError
    naming the field when that device does not exist or belongs to another process."""
    index, field = config.judge.device, "judge.device"
    if index is None and config.mesh.rollout_devices:
        index, field = config.mesh.rollout_devices[0], "mesh.rollout_devices"
    if index is None:
        return jax.local_devices()[0]
    devices = jax.devices()
    if index >= len(devices):
        raise FieldError(field, f"device {index} does not exist: JAX sees {len(devices)} (0..{len(devices) - 1})")
    if devices[index].process_index != jax.process_index():
        raise FieldError(field, f"device {index} belongs to another process; name one of this process's devices")
    return devices[index]


def load_judge(config: ExperimentConfig, progress: bool = False) -> Judge:
    """The config's judge (the `judge` section), loaded onto `judge_device(config)`. FieldError naming
    judge.model_path without a folder, judge.chat_template when the folder has no chat template to
    render with, and judge.mode when the judge's vocabulary has no token for "yes" or none for "no"."""
    j = config.judge
    if j.model_path is None:
        raise FieldError("judge.model_path", "the judge reward needs a judge model folder; set judge.model_path")
    tokenizer = model_tokenizer(j.model_path, "auto")
    chat = tokenizer.has_chat_template if j.chat_template is None else j.chat_template
    if chat and not tokenizer.has_chat_template:
        raise FieldError("judge.chat_template", f"the tokenizer in {j.model_path} has no chat template; set it false")
    yes_ids, no_ids = verdict_token_ids(tokenizer)
    if j.mode == "yes_no" and not (yes_ids and no_ids):
        raise FieldError(
            "judge.mode",
            f"the vocabulary of the tokenizer in {j.model_path} has no token that spells {YES_WORDS} or none that "
            f"spells {NO_WORDS} (in any case, with or without a leading space), so yes_no cannot read a verdict; "
            "use judge.mode number",
        )
    device = judge_device(config)
    model_config = read_model_config(j.model_path, dtype=j.dtype)
    graphdef, params = load_pretrained(j.model_path, model_config, progress=progress)
    params = jax.device_put(cast_for_generation(params, j.dtype), device)
    return Judge(
        graphdef=graphdef,
        params=params,
        tokenizer=tokenizer,
        mode=j.mode,
        template=j.template if j.template is not None else DEFAULT_TEMPLATES[j.mode],
        chat=chat,
        max_new_tokens=j.max_new_tokens,
        scale=j.scale,
        max_prompt_tokens=j.max_prompt_tokens,
        micro_batch_sequences=j.micro_batch_sequences,
        device=device,
        yes_ids=yes_ids,
        no_ids=no_ids,
    )
