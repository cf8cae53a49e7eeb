"""A pretrained model's own tokenizer, read from its Hugging Face folder, with the same interface as
the built-in CharTokenizer (trainers/data/tokenizer.py) so the trainer can take either.

The folder holds (names as on the Hugging Face Hub):

  tokenizer.json            the `tokenizers` pipeline: normalizer, pre-tokenizer, model (BPE, ...),
                            post-processor (which special tokens plain encoding adds, e.g. Llama 3's
                            <|begin_of_text|>), decoder, added tokens (required)
  tokenizer_config.json     named special tokens (bos_token, eos_token, pad_token, unk_token, ...:
                            a string, {"content": ...} or null), "chat_template", "added_tokens_decoder",
                            "clean_up_tokenization_spaces"
  chat_template.jinja       the chat template as its own file (newer folders; wins over the config's)
  special_tokens_map.json   older home of the named special tokens
  generation_config.json    "eos_token_id": int or list, every id that ends a reply
  config.json               "eos_token_id", used when generation_config.json is absent

What the methods return matches transformers 5 loading the same folder with
`PreTrainedTokenizerFast.from_pretrained` / `AutoTokenizer.from_pretrained` (tests/trainers/data/test_hf_tokenizer.py
compares them): `encode(text)` = `tok(text)["input_ids"]`, `decode(ids)` =
`tok.decode(ids, skip_special_tokens=True)` up to the first EOS, `apply_chat_template(messages)` =
`tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`.

`tokenizers` and jinja2 are imported only when a folder is loaded / a template rendered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer

from trainers.data.chat_template import (
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    conversation,
    render_chat_template,
    validate_messages,
)

# The named special tokens transformers passes to chat templates (its SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
UNKNOWN_CHAR = "\ufffd"


class HFTokenizer:
    """A Hugging Face tokenizer (tokenizer.json + configs) with the trainer's tokenizer interface.

    Attributes (ids are ints in [0, vocab_size)):
      vocab_size: ids the tokenizer can produce, added tokens included (max id + 1).
      bos_id: the BOS token's id, or None (Qwen has none).
      eos_id: the primary EOS, tokenizer_config's eos_token.
      eos_ids: every id that ends a reply, eos_id first, then generation_config's eos_token_id
        (e.g. Llama 3: <|eot_id|>, <|end_of_text|>, <|eom_id|>), without repeats.
      pad_id: the pad token's id, else eos_id.
      unk_id: the unknown token's id, or None (byte-level BPE needs none).
      has_chat_template: whether the folder has a (default) chat template.
      folder: where it was read from.
    """

    def __init__(
        self,
        backend: Any,
        *,
        special_tokens: dict[str, str],
        generation_eos_ids: Iterable[int] = (),
        chat_template: str | dict[str, str] | None = None,
        clean_up_tokenization_spaces: bool = False,
        folder: str = "",
    ) -> None:
        """Wraps a loaded `tokenizers.Tokenizer`; `from_folder` is the usual way in.

        Args:
          backend: the tokenizers.Tokenizer (tokenizer.json), special tokens already added.
          special_tokens: named special tokens present in the folder, e.g. {"eos_token": "<|im_end|>"}
            (names from SPECIAL_TOKEN_NAMES; absent names have no token).
          generation_eos_ids: further ids that end a reply (generation_config.json's eos_token_id).
          chat_template: the template text, or {name: text} where "default" is used; None: no template.
          clean_up_tokenization_spaces: tokenizer_config's flag; applied in decode for non-BPE models only,
            as transformers 5 does.
          folder: the source folder, for messages.
        """
        self._backend = backend
        self._backend.no_padding()
        self._backend.no_truncation()
        self.folder = folder
        self.special_tokens = dict(special_tokens)
        vocab = backend.get_vocab(with_added_tokens=True)
        self._vocab_size = max(backend.get_vocab_size(with_added_tokens=True), max(vocab.values(), default=-1) + 1)
        ids = {name: self._token_id(token) for name, token in self.special_tokens.items()}
        eos_ids = [ids["eos_token"]] if "eos_token" in ids else []
        for token_id in generation_eos_ids:
            token_id = int(token_id)
            if not 0 <= token_id < self._vocab_size:
                raise ValueError(
                    f"{folder}: eos_token_id {token_id} (generation_config.json / config.json) is outside the "
                    f"tokenizer's {self._vocab_size} ids"
                )
            if token_id not in eos_ids:
                eos_ids.append(token_id)
        if not eos_ids:
            raise ValueError(
                f"{folder}: no EOS token: set eos_token in tokenizer_config.json or eos_token_id in "
                f"generation_config.json (generation has to know where a reply ends)"
            )
        self._eos_ids = tuple(eos_ids)
        self._bos_id = ids.get("bos_token")
        self._pad_id = ids.get("pad_token", self._eos_ids[0])
        self._unk_id = ids.get("unk_token")
        if isinstance(chat_template, dict):
            self._chat_templates = dict(chat_template)
            chat_template = chat_template.get("default")
        else:
            self._chat_templates = {} if chat_template is None else {"default": chat_template}
        self._chat_template = chat_template
        self._tool_wrapping: bool | None = None  # `_wraps_tool_responses`, probed on first use
        self._clean_up_spaces = bool(clean_up_tokenization_spaces) and type(backend.model).__name__ != "BPE"

    @classmethod
    def from_folder(cls, path: str | Path) -> HFTokenizer:
        """Reads the tokenizer of the Hugging Face model folder `path` (see the module docstring).

        Named special tokens (and added_tokens_decoder entries) that tokenizer.json lacks are added as
        transformers adds them, after the last id (vocab_size grows). Raises ValueError naming the file
        and the problem: no folder, no tokenizer.json, a file that does not load or is not a JSON
        object, an added token whose declared id disagrees, an EOS id outside the vocabulary, no EOS.
        """

        folder = Path(path)
        if not folder.is_dir():
            raise ValueError(f"tokenizer folder {str(folder)!r} does not exist or is not a folder")
        tokenizer_file = folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            present = sorted(p.name for p in folder.iterdir())[:20]
            raise ValueError(
                f"{folder}: no tokenizer.json (files: {present}); only `tokenizers` serializations are "
                f"supported, not a SentencePiece tokenizer.model alone"
            )
        try:
            backend = Tokenizer.from_file(str(tokenizer_file))
        except Exception as error:  # the Rust side raises plain Exception for bad files
            raise ValueError(f"{tokenizer_file}: cannot load: {error}") from error
        config = _read_json(folder / "tokenizer_config.json")
        special_tokens = _named_special_tokens(config, _read_json(folder / "special_tokens_map.json"))

        # Tokens the config declares that tokenizer.json lacks are added, at the declared ids.
        declared = config.get("added_tokens_decoder") or {}
        for token_id, spec in sorted(((int(k), v) for k, v in declared.items()), key=lambda item: item[0]):
            content = spec["content"] if isinstance(spec, dict) else str(spec)
            if backend.token_to_id(content) is not None:
                continue
            options = {
                key: spec[key]
                for key in ("single_word", "lstrip", "rstrip", "normalized", "special")
                if isinstance(spec, dict) and key in spec
            }
            backend.add_tokens([AddedToken(content, **options)])
            if backend.token_to_id(content) != token_id:
                raise ValueError(
                    f"{folder}: tokenizer_config.json declares {content!r} as id {token_id}, but adding it to "
                    f"tokenizer.json gives id {backend.token_to_id(content)}"
                )
        # Named special tokens are always special added tokens (transformers adds the missing ones).
        added = {str(token.content) for token in backend.get_added_tokens_decoder().values() if token.special}
        for content in special_tokens.values():
            if content not in added:
                backend.add_special_tokens([AddedToken(content, special=True, normalized=False)])
                added.add(content)

        chat_template: str | dict[str, str] | None = config.get("chat_template")
        if isinstance(chat_template, list):
            chat_template = {entry["name"]: entry["template"] for entry in chat_template}
        template_file = folder / "chat_template.jinja"
        if template_file.is_file():
            chat_template = template_file.read_text(encoding="utf-8")

        generation = _read_json(folder / "generation_config.json")
        if not (folder / "generation_config.json").is_file():
            generation = _read_json(folder / "config.json")
        eos_token_id = generation.get("eos_token_id")
        generation_eos_ids = (
            [] if eos_token_id is None else (list(eos_token_id) if isinstance(eos_token_id, list) else [eos_token_id])
        )

        return cls(
            backend,
            special_tokens=special_tokens,
            generation_eos_ids=generation_eos_ids,
            chat_template=chat_template,
            clean_up_tokenization_spaces=bool(config.get("clean_up_tokenization_spaces", False)),
            folder=str(folder),
        )

    # ------------------------------------------------------------------ the tokenizer interface

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def bos_id(self) -> int | None:
        return self._bos_id

    @property
    def eos_id(self) -> int:
        return self._eos_ids[0]

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self._eos_ids

    @property
    def special_texts(self) -> tuple[str, ...]:
        """The text of every special added token ("<|im_start|>", "<|endoftext|>", ...): what `encode`
        turns into a special id wherever it appears in a text, longest first."""
        texts = {str(t.content) for t in self._backend.get_added_tokens_decoder().values() if t.special}
        return tuple(sorted(texts, key=lambda text: (-len(text), text)))

    @property
    def unk_id(self) -> int | None:
        return self._unk_id

    @property
    def has_chat_template(self) -> bool:
        return self._chat_template is not None

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """The ids of `text`. add_bos=True adds the special tokens the tokenizer's post-processor
        defines for one sequence (Llama: BOS first; Qwen: none), like transformers' `tok(text)`;
        False adds none. Special-token strings in `text` (e.g. "<|im_start|>") become their ids."""
        if not isinstance(text, str):
            raise ValueError(f"encode takes a string, got {type(text).__name__}")
        return list(self._backend.encode(text, add_special_tokens=add_bos).ids)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids` up to (not including) the first id in eos_ids; special tokens (BOS, PAD,
        chat markers) are skipped. Accepts any iterable of ints (a list, a 1-D numpy or jax array).

        Ids outside [0, vocab_size) (rows of a model's padded embedding that no token owns) become
        U+FFFD, as unknown ids do in CharTokenizer; the text either side is decoded separately then.
        """
        return self._decode(ids, unknown_ids=())

    def decode_completion(self, ids: Iterable[int]) -> str:
        """`decode` for generated ids: PAD and BOS sampled inside a completion become U+FFFD instead
        of being skipped (unless PAD is an EOS, which ends the text), so a policy cannot pad its way
        to a reward match; CharTokenizer.decode_completion does the same."""
        unknown = tuple(i for i in (self._pad_id, self._bos_id) if i is not None and i not in self._eos_ids)
        return self._decode(ids, unknown_ids=unknown)

    def apply_chat_template(self, messages: list[dict] | str, add_generation_prompt: bool = True) -> str:
        """The prompt text for `messages` (validated with validate_messages; a string is one user
        message) rendered with the folder's chat template, the named special tokens as variables
        (bos_token, eos_token, ...). Raises ValueError without a template or if rendering fails."""
        template = self._require_chat_template()
        variables = dict(self.special_tokens)
        messages = validate_messages(messages)
        if not self._wraps_tool_responses(template, variables):
            messages = [
                dict(m, content=TOOL_RESPONSE_OPEN + m["content"] + TOOL_RESPONSE_CLOSE) if m["role"] == "tool" else m
                for m in messages
            ]
        return render_chat_template(template, messages, add_generation_prompt=add_generation_prompt, **variables)

    def _wraps_tool_responses(self, template: str, variables: dict) -> bool:
        """Whether the chat template writes <tool_response> around a tool message itself (Qwen's do);
        where it does not (SmolLM2's), `apply_chat_template` wraps a tool message's content in those
        tags (the Hermes format the calculator's prompt describes). Probed once."""
        if self._tool_wrapping is None:
            probe = [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"},
                {"role": "tool", "content": "r"},
            ]
            try:
                self._tool_wrapping = "<tool_response>" in render_chat_template(template, probe, **variables)
            except ValueError:
                self._tool_wrapping = False
        return self._tool_wrapping

    def encode_prompt(self, prompt: str | list[dict], *, chat: bool, system_prompt: str | None = None) -> list[int]:
        """The ids of one dataset prompt (a string or a list of {"role", "content"} messages).

        chat=True: a string becomes [{"role": "user", "content": prompt}]; `system_prompt` (if given
        and no message has role "system") is put first as {"role": "system", ...}; the chat template
        is rendered with the generation prompt and encoded WITHOUT adding special tokens (the template
        writes them), as transformers' apply_chat_template(..., tokenize=True) does.
        chat=False: a string is `encode(prompt, add_bos=True)`; a message list or a system prompt
        is an error (they need the chat template: data.chat_template).
        """
        if chat:
            messages = conversation(prompt, system_prompt)
            return self.encode(self.apply_chat_template(messages, add_generation_prompt=True), add_bos=False)
        if not isinstance(prompt, str):
            validate_messages(prompt)  # a malformed value gets the message naming what is wrong
            raise ValueError(
                "this prompt is a list of chat messages; enable data.chat_template to render it with the "
                "model's chat template"
            )
        if system_prompt is not None:
            raise ValueError("a system prompt needs the chat template: enable data.chat_template")
        return self.encode(prompt, add_bos=True)

    # ------------------------------------------------------------------ helpers

    def _decode(self, ids: Iterable[int], unknown_ids: tuple[int, ...]) -> str:
        """Text of `ids` up to the first EOS; ids in `unknown_ids` or outside [0, vocab_size) become
        U+FFFD, the runs between them decoded on their own (special tokens skipped)."""
        eos, unknown = set(self._eos_ids), set(unknown_ids)
        kept: list[int] = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id in eos:
                break
            kept.append(token_id)
        pieces, start = [], 0
        for index, token_id in enumerate(kept):
            if token_id in unknown or not 0 <= token_id < self._vocab_size:
                pieces.append(self._decode_known(kept[start:index]))
                pieces.append(UNKNOWN_CHAR)
                start = index + 1
        pieces.append(self._decode_known(kept[start:]))
        return "".join(pieces)

    def _decode_known(self, ids: list[int]) -> str:
        if not ids:
            return ""
        text = self._backend.decode(ids, skip_special_tokens=True)
        return _clean_up_tokenization(text) if self._clean_up_spaces else text

    def token_text(self, token_id: int) -> str:
        """The vocabulary string of one id as the tokenizer writes it (a special token's own text,
        "<|im_end|>"; "" for an id no token owns): what a chat template writes for that token."""
        return self._backend.id_to_token(int(token_id)) or ""

    def _token_id(self, token: str) -> int:
        token_id = self._backend.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{self.folder}: special token {token!r} is not in the vocabulary")
        return token_id

    def _require_chat_template(self) -> str:
        if self._chat_template is None:
            if self._chat_templates:
                raise ValueError(
                    f"{self.folder}: several chat templates {sorted(self._chat_templates)} and none named 'default'"
                )
            raise ValueError(
                f"{self.folder}: the tokenizer has no chat_template (tokenizer_config.json or "
                f"chat_template.jinja); disable data.chat_template for this model"
            )
        return self._chat_template

    def __repr__(self) -> str:
        return (
            f"HFTokenizer({self.folder!r}, vocab_size={self.vocab_size}, bos_id={self.bos_id}, "
            f"eos_ids={self.eos_ids}, pad_id={self.pad_id}, chat_template={self.has_chat_template})"
        )


def _read_json(path: Path) -> dict:
    """The JSON object in `path`, {} if the file is absent; ValueError if it is not a JSON object."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON: {error}") from error
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _token_content(value: Any) -> str | None:
    """A special token as configs write it ("<s>", {"content": "<s>", ...} or null) -> its string."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"a special token must be a string or {{\"content\": ...}}, got {value!r}")


def _named_special_tokens(config: dict, special_tokens_map: dict) -> dict[str, str]:
    """{"bos_token": "<s>", ...} for the named tokens set (SPECIAL_TOKEN_NAMES).

    tokenizer_config.json gives them; special_tokens_map.json fills names it lacks, and (as in
    transformers 5) overrides it in old folders whose config has no "added_tokens_decoder".
    """
    legacy = "added_tokens_decoder" not in config
    tokens = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if name in special_tokens_map and (legacy or name not in config):
            value = special_tokens_map[name]
        content = _token_content(value)
        if content:
            tokens[name] = content
    return tokens


def _clean_up_tokenization(text: str) -> str:
    """transformers' clean_up_tokenization: no space before punctuation and English contractions."""
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )
