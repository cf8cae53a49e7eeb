"""The judge's verdict tokens (`rollout.judge.verdict_token_ids`) read from the vocabulary: every
token that spells yes / no in any case after the marks of a leading space or line break, special
tokens and ids of both sets left out. A Metaspace (SentencePiece-style) tokenizer built here, whose
encode("Yes") is "▁Yes" and whose unknown words all encode to one <unk>, and SmolLM2's byte-level
BPE, the judge of tests/trainers/rollout/test_judge.py. No model is loaded."""

from __future__ import annotations

import json

import pytest

from trainers.data.hf_tokenizer import HFTokenizer
from trainers.rollout.judge import verdict_token_ids

METASPACE_VOCAB = [
    "<unk>",  # 0
    "<s>",  # 1
    "</s>",  # 2
    "\u2581Yes",  # 3  "Yes" at the start of a text or after a space
    "Yes",  # 4  "Yes" after a newline or inside a word: what encode never gives for the text "Yes"
    "\u2581yes",  # 5
    "YES",  # 6
    "\u2581No",  # 7
    "No",  # 8
    "\u2581no",  # 9
    "\u2581Yesterday",  # 10  starts with yes: not a verdict
    "\u2581Not",  # 11
    "\u2581The",  # 12
    "\u2581answer",  # 13
    "\u2581is",  # 14
    "\u2581",  # 15
]


def metaspace_tokenizer(folder) -> HFTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(METASPACE_VOCAB)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    folder.mkdir()
    backend.save(str(folder / "tokenizer.json"))
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        # a special added token that spells a verdict word: left out, as every special token is
        "added_tokens_decoder": {"16": {"content": "NO", "special": True, "normalized": False}},
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return HFTokenizer.from_folder(folder)


def test_a_metaspace_vocabulary_gives_every_spelling_and_no_unknown_token(tmp_path):
    tokenizer = metaspace_tokenizer(tmp_path / "metaspace")
    # the trap of encoding the words: "Yes" comes out as "▁Yes", unknown spellings all as <unk>
    assert tokenizer.encode("Yes", add_bos=False) == [3]
    assert tokenizer.encode("yES", add_bos=False) == tokenizer.encode("nO", add_bos=False) == [0]
    assert tokenizer.encode("NO", add_bos=False) == [16]
    yes, no = verdict_token_ids(tokenizer)
    assert yes == (3, 4, 5, 6)  # ▁Yes, Yes, ▁yes, YES; not ▁Yesterday
    assert no == (7, 8, 9)  # ▁No, No, ▁no; not ▁Not, nor the special "NO" (16)
    assert tokenizer.unk_id == 0 and 0 not in yes + no


def test_an_id_in_both_sets_is_left_out(tmp_path):
    tokenizer = metaspace_tokenizer(tmp_path / "metaspace")
    yes, no = verdict_token_ids(tokenizer, ("yes", "No"), ("no",))
    assert yes == (3, 4, 5, 6) and no == ()  # every "no" token was in both sets


def test_smollm2_byte_level_vocabulary(smollm2_dir):
    """Byte-level BPE writes a leading space as "Ġ": "Ġyes" counts as "yes", "ĠNO" as "no"."""
    tokenizer = HFTokenizer.from_folder(smollm2_dir)
    yes, no = verdict_token_ids(tokenizer)
    assert sorted(tokenizer.token_text(i) for i in yes) == sorted(["Yes", "yes", "\u0120Yes", "\u0120yes"])
    assert sorted(tokenizer.token_text(i) for i in no) == sorted(["No", "no", "NO", "\u0120No", "\u0120no", "\u0120NO"])
    assert tokenizer.encode("Yes", add_bos=False)[0] in yes and tokenizer.encode(" no", add_bos=False)[0] in no
    special = {tokenizer.encode(text, add_bos=False)[0] for text in tokenizer.special_texts}
    assert not special & set(yes + no)


@pytest.mark.parametrize("text", ["\u010aYes", "\u2581\u2581yes", "\u0120 YES"])
def test_newline_and_space_marks_are_stripped(tmp_path, text):
    """A byte-level newline ("Ċ"), a doubled Metaspace mark and a mark followed by a space still spell yes."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "</s>": 1, text: 2, "no": 3}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = tmp_path / "tok"
    folder.mkdir()
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>", "unk_token": "<unk>"}))
    assert verdict_token_ids(HFTokenizer.from_folder(folder)) == ((2,), (3,))
