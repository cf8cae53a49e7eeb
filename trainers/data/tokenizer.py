"""Character-level tokenizer for the built-in tasks.

Id layout (vocab_size 100, fits the smallest model preset's vocab of 128):

    0 PAD, 1 BOS, 2 EOS, 3 UNK, 4 "\\n", 5..99 printable ASCII 32..126 (" " .. "~")

Ids a model may sample outside this range (100..vocab-1 of a larger model
vocabulary) decode like UNK, to the replacement character U+FFFD, so they
count as wrong characters in every reward.

Pretrained models bring their own tokenizer (trainers/data/hf_tokenizer.py, same interface);
`load_tokenizer("char" | folder)` returns either.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
_FIRST_CHAR_ID = 4
_CHARS = "\n" + "".join(chr(code) for code in range(32, 127))
UNKNOWN_CHAR = "\ufffd"


class CharTokenizer:
    """Maps each character to one id; unknown characters map to UNK."""

    def __init__(self) -> None:
        self._id_of_char = {char: _FIRST_CHAR_ID + index for index, char in enumerate(_CHARS)}
        self._char_of_id = {token_id: char for char, token_id in self._id_of_char.items()}

    @property
    def vocab_size(self) -> int:
        return _FIRST_CHAR_ID + len(_CHARS)

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """Every id that ends a completion: EOS only (HFTokenizer may have several)."""
        return (EOS_ID,)

    @property
    def has_chat_template(self) -> bool:
        return False

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Returns the ids of `text`, one per character, with BOS first if add_bos.

        No EOS is appended: prompts end where the completion begins.
        """
        ids = [BOS_ID] if add_bos else []
        ids.extend(self._id_of_char.get(char, UNK_ID) for char in text)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Returns the text of `ids` up to (not including) the first EOS.

        PAD and BOS are skipped; UNK and ids outside the vocabulary become U+FFFD.
        Accepts any iterable of ints (a list, a 1-D numpy or jax array).
        """
        chars = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == EOS_ID:
                break
            if token_id in (PAD_ID, BOS_ID):
                continue
            chars.append(self._char_of_id.get(token_id, UNKNOWN_CHAR))
        return "".join(chars)

    def decode_completion(self, ids: Iterable[int]) -> str:
        """`decode` for generated ids: PAD or BOS sampled inside a completion become U+FFFD (as UNK
        does) instead of being skipped, so a policy cannot pad its way to a reward match."""
        return self.decode(UNK_ID if int(token_id) in (PAD_ID, BOS_ID) else int(token_id) for token_id in ids)

    def encode_prompt(self, prompt: str, *, chat: bool = False, system_prompt: str | None = None) -> list[int]:
        """The ids of one dataset prompt: `encode(prompt, add_bos=True)` (BOS + one id per character).

        The character tokenizer has no chat template: chat=True, a system prompt or a prompt given as
        a list of chat messages raise ValueError (same interface as HFTokenizer.encode_prompt).
        """
        if chat:
            raise ValueError("the char tokenizer has no chat template; disable data.chat_template")
        if not isinstance(prompt, str):
            raise ValueError(
                f"the char tokenizer takes string prompts, got {type(prompt).__name__}; chat message lists "
                f"need a model tokenizer with a chat template (data.chat_template)"
            )
        if system_prompt is not None:
            raise ValueError("a system prompt needs a chat template; the char tokenizer has none")
        return self.encode(prompt, add_bos=True)


def get_tokenizer(name: str = "char") -> CharTokenizer:
    """Returns the tokenizer called `name`; only "char" exists."""
    if name == "char":
        return CharTokenizer()
    raise ValueError(f"unknown tokenizer {name!r}; known: 'char'")


def model_tokenizer(model_path: str | None, name: str = "char"):
    """A run's tokenizer: the model folder's own with a `model_path` (unless `name`, data.tokenizer,
    is "char"), else the built-in character tokenizer."""
    if model_path is not None and name != "char":
        # lazy: `tokenizers` only for a model folder (validation imports this module)
        from trainers.data.hf_tokenizer import HFTokenizer

        return HFTokenizer.from_folder(model_path)
    return get_tokenizer("char")


def load_tokenizer(name_or_folder: str):
    """Returns the tokenizer for `name_or_folder`: "char" gives CharTokenizer; a path to a Hugging
    Face model folder (with tokenizer.json) gives its HFTokenizer. No hub downloads: a folder must
    exist locally. Raises ValueError otherwise.

    `tokenizers` / jinja2 are imported only for a folder (config validation imports this module).
    """
    if name_or_folder == "char":
        return CharTokenizer()
    if os.path.isdir(name_or_folder):
        # lazy: `tokenizers` only for a model folder (validation imports this module)
        from trainers.data.hf_tokenizer import HFTokenizer

        return HFTokenizer.from_folder(name_or_folder)
    raise ValueError(
        f"unknown tokenizer {name_or_folder!r}: give 'char' or the path of a local model folder with tokenizer.json"
    )
