"""HFTokenizer and the chat template renderer against transformers 5, the independent reference.

Each tokenizer folder is built here in tmp_path with the `tokenizers` library: a small BPE trained on a
multilingual sample, wrapped the way a real model's folder is (pipeline, special tokens, configs, the
model's real chat template copied as a fixture):

  qwen     Qwen2.5-Instruct style: NFC + Qwen's split regex + byte-level BPE, <|endoftext|> <|im_start|>
           <|im_end|> after the vocabulary, no BOS, eos <|im_end|>, pad <|endoftext|>, the Qwen2.5 template
           (default system message), generation_config eos [<|im_end|>, <|endoftext|>];
           loaded by transformers as tokenizer_class Qwen2Tokenizer (which rebuilds its own pipeline).
  smollm   SmolLM2-Instruct style: GPT-2 byte-level BPE with the special tokens first (ids 0, 1, 2),
           bos <|im_start|>, eos/pad <|im_end|>, the SmolLM2 ChatML template.
  llama3   Llama-3.2-Instruct style: Llama 3 split regex, <|begin_of_text|> added by a TemplateProcessing
           post-processor, eos <|eot_id|>, no pad, generation_config eos [<|end_of_text|>, <|eom_id|>,
           <|eot_id|>], clean_up_tokenization_spaces true (transformers 5 ignores it for BPE), the
           Llama 3.2 template (bos_token, strftime_now, raise_exception, tojson).
  llama2   Llama-2-chat style: Metaspace BPE with byte fallback (<0x00>..<0xFF>), <s> via TemplateProcessing,
           unk <unk>, the Llama 2 [INST] template (raise_exception on non-alternating roles).

The reference is `transformers.AutoTokenizer.from_pretrained(folder)`: encode = tok(text)["input_ids"],
decode = tok.decode(ids, skip_special_tokens=True), chat = tok.apply_chat_template(...).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers as bpe_trainers

from trainers.data.chat_template import render_chat_template, validate_messages
from trainers.data.encoding import encode_prompts
from trainers.data.examples import DataError, read_jsonl
from trainers.data.hf_tokenizer import HFTokenizer
from trainers.data.tokenizer import CharTokenizer, get_tokenizer, load_tokenizer

# ---------------------------------------------------------------- fixtures: text and templates

SAMPLE = [
    "The quick brown fox jumps over the lazy dog. Don't panic: it's only 42!",
    "I'm sure they've seen what we're doing, aren't they? Yes, they'll know.",
    "Größere Äpfel über Öl: Übermut tut selten gut, sagte der Straßenbäcker.",
    "Die Bäume blühen im Frühling, und die Vögel singen fröhlich.",
    "我们今天学习机器学习和自然语言处理。中文分词很有意思。",
    "今日は良い天気ですね。カタカナとひらがなを勉強しています。",
    "Привет, мир! Как дела? Сегодня хорошая погода для прогулки.",
    "مرحبا بالعالم. كيف حالك اليوم؟ الطقس جميل.",
    "Emoji: 🤖🚀👍🏽 and a family 👨‍👩‍👧 in one line ✨.",
    "Numbers 1234567 3.14159 1,000,000 and 2024-07-26 at 13:45.",
    "def square(x):\n    return x ** 2  # the square\n\nprint([square(i) for i in range(10)])",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }\n\tindent\twith tabs",
    "   leading spaces and trailing spaces   \n\n\nnew lines",
]

TEXTS = SAMPLE + [
    "",
    " ",
    "a",
    "Unseen words: zymurgy quixotic 鑫龘 ß € ½ ﬁ 🦀",
    "e\u0301 vs \u00e9 (combining accent; NFC matters)",
    "special strings in text: <|im_start|>user\nhi<|im_end|> <|begin_of_text|> <s> </s> [INST]",
    "Mixed: Größe 大小 サイズ размер الحجم 📏 123",
    "  double  spaces\tand\r\nwindows newlines  ",
    "<|eot_id|> ends Llama 3 turns, <|endoftext|> ends documents",
]

# Qwen2.5-Instruct's chat_template (tokenizer_config.json of Qwen/Qwen2.5-*-Instruct), copied as a fixture.
QWEN25_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# SmolLM2-Instruct's chat_template (HuggingFaceTB/SmolLM2-*-Instruct), copied as a fixture.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Llama-3.2-Instruct's chat_template (meta-llama/Llama-3.2-1B-Instruct), copied as a fixture.
LLAMA32_TEMPLATE = "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n{#- This block extracts the system message, so we can slot it into the right place. #}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n\n{#- System message #}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{%- if tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{%- if tools is not none and not tools_in_user_message %}\n    {{- \"You have access to the following functions. To call a function, please respond with JSON for a function call.\" }}\n    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n\n{#- Custom tools are passed in a user message with some extra guidance #}\n{%- if tools_in_user_message and not tools is none %}\n    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n        {%- set first_user_message = messages[0]['content']|trim %}\n        {%- set messages = messages[1:] %}\n    {%- else %}\n        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n{%- endif %}\n    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n    {{- first_user_message + \"<|eot_id|>\"}}\n{%- endif %}\n\n{%- for message in messages %}\n    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n    {%- elif 'tool_calls' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n        {%- endif %}\n        {%- set tool_call = message.tool_calls[0].function %}\n        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n        {{- '\"parameters\": ' }}\n        {{- tool_call.arguments | tojson }}\n        {{- \"}\" }}\n        {{- \"<|eot_id|>\" }}\n    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n        {%- if message.content is mapping or message.content is iterable %}\n            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n        {{- \"<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"  # noqa: E501

# Llama-2-chat's chat_template (meta-llama/Llama-2-7b-chat-hf), copied as a fixture.
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "What is 2+3? Antworte auf Deutsch: Größe?"}],
    "system_user": [
        {"role": "system", "content": "You are a careful math tutor. 你好!"},
        {"role": "user", "content": "  Solve x^2 = 9.  "},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Привет! How many legs has a spider?"},
        {"role": "assistant", "content": "Eight. 🕷️"},
        {"role": "user", "content": "And an ant?\nThink step by step."},
    ],
    "multi_turn_no_system": [
        {"role": "user", "content": "مرحبا"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "def f(x): return x  # explain"},
    ],
}


# ---------------------------------------------------------------- fixtures: tokenizer folders


def _train_bpe(tokenizer: Tokenizer, vocab_size: int, special_tokens=(), **trainer_options) -> Tokenizer:
    trainer = bpe_trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False, **trainer_options
    )
    tokenizer.train_from_iterator(SAMPLE * 3, trainer)
    return tokenizer


def _write_folder(
    folder: Path, tokenizer: Tokenizer, tokenizer_config: dict, *, generation_config=None, config=None
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    added = {
        str(token_id): {
            "content": token.content,
            "lstrip": token.lstrip,
            "normalized": token.normalized,
            "rstrip": token.rstrip,
            "single_word": token.single_word,
            "special": token.special,
        }
        for token_id, token in sorted(tokenizer.get_added_tokens_decoder().items())
    }
    (folder / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added, **tokenizer_config}))
    if generation_config is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation_config))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def build_qwen(folder: Path) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    _train_bpe(tokenizer, 700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
    )
    tokenizer.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    endoftext, im_end = tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|im_end|>")
    return _write_folder(
        folder,
        tokenizer,
        {
            "tokenizer_class": "Qwen2Tokenizer",
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "chat_template": QWEN25_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 131072,
            "split_special_tokens": False,
            "errors": "replace",
        },
        generation_config={"bos_token_id": endoftext, "eos_token_id": [im_end, endoftext], "pad_token_id": endoftext},
        config={"model_type": "qwen2", "eos_token_id": endoftext, "vocab_size": tokenizer.get_vocab_size() + 64},
    )


def build_smollm(folder: Path) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    _train_bpe(
        tokenizer,
        600,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    return _write_folder(
        folder,
        tokenizer,
        {
            "tokenizer_class": "GPT2Tokenizer",
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<|im_end|>",
            "unk_token": "<|endoftext|>",
            "chat_template": SMOLLM2_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 8192,
        },
        generation_config={"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2},
    )


def build_llama3(folder: Path) -> Path:
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    _train_bpe(tokenizer, 800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA3_SPECIALS])
    ids = {t: tokenizer.token_to_id(t) for t in LLAMA3_SPECIALS}
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                special_tokens=[("<|begin_of_text|>", ids["<|begin_of_text|>"])],
            ),
        ]
    )
    return _write_folder(
        folder,
        tokenizer,
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "chat_template": LLAMA32_TEMPLATE,
            "clean_up_tokenization_spaces": True,
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": 131072,
        },
        generation_config={
            "bos_token_id": ids["<|begin_of_text|>"],
            "do_sample": True,
            "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]],
        },
        config={"model_type": "llama", "bos_token_id": ids["<|begin_of_text|>"], "eos_token_id": ids["<|eot_id|>"]},
    )


def build_llama2(folder: Path) -> Path:
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    _train_bpe(trained, 900, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens], limit_alphabet=150)
    # Byte tokens belong to the model vocabulary (as in Llama 2), not to the added tokens.
    data = json.loads(trained.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in ("<unk>", "<s>", "</s>")]
    data["model"]["byte_fallback"] = True
    data["model"]["fuse_unk"] = True
    tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)]
    )
    return _write_folder(
        folder,
        tokenizer,
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": None,
            "add_bos_token": True,
            "add_eos_token": False,
            "legacy": False,
            "chat_template": LLAMA2_TEMPLATE,
            "clean_up_tokenization_spaces": False,
        },
        generation_config={"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0},
    )


BUILDERS = {"qwen": build_qwen, "smollm": build_smollm, "llama3": build_llama3, "llama2": build_llama2}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {name: build(root / name) for name, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def pairs(folders) -> dict[str, tuple[HFTokenizer, object]]:
    """name -> (HFTokenizer, the transformers tokenizer of the same folder)."""
    return {
        name: (HFTokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(str(folder)))
        for name, folder in folders.items()
    }


def _ids(output) -> list[int]:
    """transformers 5's apply_chat_template(tokenize=True) returns a BatchEncoding (return_dict=True by
    default); older versions a list."""
    if isinstance(output, list):
        return output
    return list(output["input_ids"])


# ---------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("name", list(BUILDERS))
def test_reference_uses_the_folder_pipeline(pairs, name):
    """Guards the reference itself: transformers sees the same vocabulary and special tokens."""
    ours, ref = pairs[name]
    assert ours.vocab_size == len(ref)
    assert ours.eos_id == ref.eos_token_id
    assert ours.bos_id == ref.bos_token_id
    assert ours.unk_id == ref.unk_token_id


@pytest.mark.parametrize("name", list(BUILDERS))
def test_encode_matches_transformers(pairs, name):
    ours, ref = pairs[name]
    for text in TEXTS:
        assert ours.encode(text) == ref(text)["input_ids"], text
        assert ours.encode(text, add_bos=False) == ref(text, add_special_tokens=False)["input_ids"], text


@pytest.mark.parametrize("name", list(BUILDERS))
def test_decode_matches_transformers(pairs, name):
    ours, ref = pairs[name]
    eos = set(ours.eos_ids)
    for text in TEXTS:
        ids = ref(text)["input_ids"]
        if eos & set(ids):
            continue
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), text
        assert ours.decode(np.array(ids, dtype=np.int32)) == ours.decode(ids)
    # Arbitrary id sequences too: byte-level pieces that split UTF-8 characters, specials mid-text.
    rng = np.random.default_rng(0)
    allowed = np.array([i for i in range(ours.vocab_size) if i not in eos])
    for _ in range(50):
        ids = rng.choice(allowed, size=int(rng.integers(1, 30))).tolist()
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), ids


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(pairs, name, conversation, add_generation_prompt):
    ours, ref = pairs[name]
    messages = CONVERSATIONS[conversation]  # all alternate user/assistant, as the Llama 2 template demands
    expected = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == expected


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_encode_prompt_chat_matches_transformers(pairs, name, conversation):
    ours, ref = pairs[name]
    messages = CONVERSATIONS[conversation]
    expected = _ids(ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
    assert ours.encode_prompt(messages, chat=True) == expected


@pytest.mark.parametrize("name", list(BUILDERS))
def test_encode_prompt_string_and_system_prompt(pairs, name):
    ours, ref = pairs[name]
    prompt = "Compute 17 * 23. Rechne schnell!"
    user = [{"role": "user", "content": prompt}]
    assert ours.encode_prompt(prompt, chat=True) == _ids(ref.apply_chat_template(user, add_generation_prompt=True))
    with_system = [{"role": "system", "content": "Answer with a number."}] + user
    assert ours.encode_prompt(prompt, chat=True, system_prompt="Answer with a number.") == _ids(
        ref.apply_chat_template(with_system, add_generation_prompt=True)
    )
    # A conversation that has its own system message keeps it; the system prompt is not added.
    own = [{"role": "system", "content": "Own system."}] + user
    assert ours.encode_prompt(own, chat=True, system_prompt="Ignored.") == _ids(
        ref.apply_chat_template(own, add_generation_prompt=True)
    )
    # Without chat: the plain encoding, special tokens as the post-processor adds them.
    assert ours.encode_prompt(prompt, chat=False) == ref(prompt)["input_ids"]
    with pytest.raises(ValueError, match="data.chat_template"):
        ours.encode_prompt(user, chat=False)
    with pytest.raises(ValueError, match="system prompt"):
        ours.encode_prompt(prompt, chat=False, system_prompt="x")


def test_special_ids(pairs):
    qwen, ref = pairs["qwen"]
    assert qwen.bos_id is None and qwen.unk_id is None
    assert qwen.eos_ids == (ref.convert_tokens_to_ids("<|im_end|>"), ref.convert_tokens_to_ids("<|endoftext|>"))
    assert qwen.pad_id == ref.pad_token_id == ref.convert_tokens_to_ids("<|endoftext|>")
    assert qwen.has_chat_template

    llama3, ref = pairs["llama3"]
    eot, end, eom = (ref.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"))
    assert llama3.eos_id == eot
    assert llama3.eos_ids == (eot, end, eom)  # primary first, then generation_config's order
    assert ref.pad_token_id is None and llama3.pad_id == eot  # no pad token: pad falls back to EOS
    assert llama3.bos_id == ref.bos_token_id and llama3.encode("hi")[0] == llama3.bos_id
    assert llama3.encode("hi", add_bos=False)[0] != llama3.bos_id

    smollm, ref = pairs["smollm"]
    assert (smollm.bos_id, smollm.eos_id, smollm.pad_id, smollm.unk_id) == (1, 2, 2, 0)
    assert smollm.eos_ids == (2,)
    assert smollm.encode("hi") == smollm.encode("hi", add_bos=False)  # no post-processor BOS

    llama2, ref = pairs["llama2"]
    assert (llama2.unk_id, llama2.bos_id, llama2.eos_ids, llama2.pad_id) == (0, 1, (2,), 2)


def test_decode_stops_at_every_eos(pairs):
    llama3, _ = pairs["llama3"]
    body = llama3.encode("Eight legs.", add_bos=False)
    for eos in llama3.eos_ids:
        assert llama3.decode(body + [eos] + body) == "Eight legs."
    assert llama3.decode([llama3.bos_id] + body) == "Eight legs."  # specials skipped
    qwen, _ = pairs["qwen"]
    body = qwen.encode("Acht Beine.")
    assert qwen.decode(body + [qwen.eos_ids[1]] + body) == "Acht Beine."
    assert qwen.decode(body + [qwen.pad_id]) == "Acht Beine."  # <|endoftext|> is an EOS here as well


def test_decode_ids_outside_vocabulary_become_replacement_char(pairs):
    qwen, _ = pairs["qwen"]
    a, b = qwen.encode("ab", add_bos=False)[:1], qwen.encode(" cd", add_bos=False)
    assert qwen.decode(a + [qwen.vocab_size + 5] + b) == qwen.decode(a) + "\ufffd" + qwen.decode(b)
    assert qwen.decode([qwen.vocab_size]) == "\ufffd"


def test_decode_completion_marks_pad_and_bos(pairs):
    llama3, _ = pairs["llama3"]
    a, b = llama3.encode("Acht", add_bos=False), llama3.encode(" Beine", add_bos=False)
    assert llama3.decode(a + [llama3.bos_id] + b) == "Acht Beine"  # prompts: BOS skipped
    assert llama3.decode_completion(a + [llama3.bos_id] + b) == "Acht\ufffd Beine"
    assert llama3.decode_completion(np.array(a + [llama3.pad_id] + b)) == "Acht"  # pad = <|eot_id|> ends it
    assert llama3.decode_completion(a + b) == llama3.decode(a + b) == "Acht Beine"
    smollm, _ = pairs["smollm"]
    a = smollm.encode("Acht")
    assert smollm.decode_completion(a + [smollm.bos_id] + a) == "Acht\ufffdAcht"


def test_char_tokenizer_decode_completion():
    tokenizer = CharTokenizer()
    a, b, c, d = tokenizer.encode("abcd", add_bos=False)
    ids = np.array([a, 0, b, 1, c, 3, d, 2, a])
    assert tokenizer.decode(ids) == "abc\ufffdd"
    assert tokenizer.decode_completion(ids) == "a\ufffdb\ufffdc\ufffdd"
    assert tokenizer.decode_completion([200, a]) == "\ufffda"


def test_real_smollm2_folder_matches_transformers(smollm2_dir):
    """The real SmolLM2-135M-Instruct tokenizer (49152 ids), as fetch-model builds it from the GGUF."""
    ours, ref = HFTokenizer.from_folder(smollm2_dir), transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert ours.vocab_size == len(ref) and ours.eos_ids == (ref.eos_token_id,)
    for text in TEXTS + [Path(__file__).read_text(encoding="utf-8")[:20000]]:
        ids = ref(text)["input_ids"]
        assert ours.encode(text) == ids
        if ours.eos_id not in ids:
            assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True)
    for messages in CONVERSATIONS.values():
        expected = _ids(ref.apply_chat_template(messages, add_generation_prompt=True))
        assert ours.encode_prompt(messages, chat=True) == expected


# ---------------------------------------------------------------- folder variants and errors


def test_chat_template_jinja_file_wins_and_list_templates(folders, tmp_path):
    import shutil

    folder = Path(shutil.copytree(folders["smollm"], tmp_path / "smollm"))
    (folder / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    ours, ref = HFTokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    messages = CONVERSATIONS["multi_turn"]
    assert ours.apply_chat_template(messages) == ref.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert ours.apply_chat_template(messages).startswith("[system]Be brief.")

    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": SMOLLM2_TEMPLATE},
        {"name": "tool_use", "template": "tools!"},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours, ref = HFTokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    assert ours.apply_chat_template(messages) == ref.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )

    config.pop("chat_template")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours = HFTokenizer.from_folder(folder)
    assert not ours.has_chat_template
    with pytest.raises(ValueError, match="no chat_template"):
        ours.encode_prompt("hi", chat=True)
    assert ours.encode_prompt("hi", chat=False) == ours.encode("hi")


def test_special_tokens_map_and_config_eos(folders, tmp_path):
    """Old folders: named tokens in special_tokens_map.json; no generation_config.json -> config.json."""
    import shutil

    folder = Path(shutil.copytree(folders["llama3"], tmp_path / "llama3"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    for key in ("added_tokens_decoder", "bos_token", "eos_token"):
        config.pop(key)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "bos_token": {
                    "content": "<|begin_of_text|>",
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                },
                "eos_token": "<|end_of_text|>",
            }
        )
    )
    (folder / "generation_config.json").unlink()
    ours, ref = HFTokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    assert ours.eos_id == ref.eos_token_id == ref.convert_tokens_to_ids("<|end_of_text|>")
    assert ours.bos_id == ref.bos_token_id
    eot = ref.convert_tokens_to_ids("<|eot_id|>")
    assert ours.eos_ids == (ours.eos_id, eot)  # config.json's eos_token_id
    assert ours.encode(TEXTS[2]) == ref(TEXTS[2])["input_ids"]


def test_unigram_with_clean_up_spaces_matches_transformers(tmp_path):
    """A T5-style Unigram tokenizer (EOS appended by its post-processor, no BOS) with
    clean_up_tokenization_spaces: transformers 5 applies the clean-up to non-BPE models only."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = bpe_trainers.UnigramTrainer(
        vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
    )
    tokenizer.train_from_iterator(SAMPLE * 3, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", 1)]
    )
    folder = _write_folder(
        tmp_path / "t5",
        tokenizer,
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "clean_up_tokenization_spaces": True,
        },
    )
    ours, ref = HFTokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    assert (ours.bos_id, ours.eos_ids, ours.pad_id, ours.unk_id) == (None, (1,), 0, 2)
    for text in TEXTS + ["Hello , world . Don 't stop ! Isn 't it ?"]:
        ids = ref(text)["input_ids"]
        assert ours.encode(text) == ids and ids[-1] == 1
        body = ref(text, add_special_tokens=False)["input_ids"]
        if 1 not in body:
            assert ours.decode(body) == ref.decode(body, skip_special_tokens=True), text
    decoded = ours.decode(ours.encode("Hello , world . Don 't stop !", add_bos=False))
    assert " ," not in decoded and " ." not in decoded and " !" not in decoded  # the clean-up ran


def test_folder_errors(tmp_path, folders):
    with pytest.raises(ValueError, match="does not exist"):
        HFTokenizer.from_folder(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no tokenizer.json"):
        HFTokenizer.from_folder(tmp_path / "empty")
    import shutil

    folder = Path(shutil.copytree(folders["llama3"], tmp_path / "broken"))
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer_config.json: not valid JSON"):
        HFTokenizer.from_folder(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|begin_of_text|>"}))
    (folder / "generation_config.json").unlink()
    (folder / "config.json").unlink()
    with pytest.raises(ValueError, match="no EOS token"):
        HFTokenizer.from_folder(folder)


def test_load_tokenizer(folders):
    assert isinstance(load_tokenizer("char"), CharTokenizer)
    assert isinstance(get_tokenizer("char"), CharTokenizer)
    tokenizer = load_tokenizer(str(folders["qwen"]))
    assert isinstance(tokenizer, HFTokenizer) and tokenizer.has_chat_template
    with pytest.raises(ValueError, match="unknown tokenizer 'gpt2'"):
        load_tokenizer("gpt2")


# ---------------------------------------------------------------- the renderer on its own


def test_render_chat_template_environment():
    messages = [{"role": "user", "content": "hi"}]
    # trim_blocks / lstrip_blocks: a block tag's own line leaves no whitespace behind.
    template = (
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n<{{ m.content }}>\n    {% endif %}\n{% endfor %}"
    )
    assert render_chat_template(template, messages) == "<hi>\n"
    # loopcontrols, tojson without HTML escaping, namespace, {% generation %}, add_generation_prompt.
    template = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{% set ns.n = ns.n + 1 %}{{ m | tojson }}{% endfor %}{{ ns.n }}"
        "{% generation %}[{{ bos_token }}]{% endgeneration %}{{ add_generation_prompt }}"
    )
    out = render_chat_template(template, messages + [{"role": "user", "content": "<&>"}], bos_token="<s>")
    assert out == '{"role": "user", "content": "hi"}1[<s>]True'
    assert (
        render_chat_template("{{ tojson(1) if false }}{{ {'b': 'ü'} | tojson(indent=1) }}", messages)
        == '{\n "b": "ü"\n}'
    )
    assert len(render_chat_template("{{ strftime_now('%Y') }}", messages)) == 4
    assert (
        render_chat_template("{{ messages[0].keys() | list }}", [{"role": "u", "content": "c", "x": None}])
        == "['role', 'content']"
    )  # None-valued keys are dropped


def test_render_chat_template_errors():
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="does not parse: line 1"):
        render_chat_template("{% for m in messages %}", messages)
    with pytest.raises(ValueError, match="failed while rendering: .*roles must alternate"):
        render_chat_template("{{ raise_exception('roles must alternate') }}", messages)
    with pytest.raises(ValueError, match="failed while rendering"):
        render_chat_template("{{ bos_token + 'x' }}", messages)  # undefined bos_token
    with pytest.raises(ValueError, match="failed while rendering"):  # the sandbox refuses internals
        render_chat_template("{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}", messages)
    with pytest.raises(ValueError, match="underscore"):
        render_chat_template("{% set ns = namespace(_x=1) %}", messages)
    with pytest.raises(ValueError, match="messages must be a list of dicts"):
        render_chat_template("x", ["hi"])


def test_llama2_template_raise_exception_matches_transformers(pairs):
    ours, ref = pairs["llama2"]
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(Exception, match="Conversation roles must alternate"):
        ref.apply_chat_template(bad, tokenize=False)
    with pytest.raises(ValueError, match="Conversation roles must alternate"):
        ours.apply_chat_template(bad)


@pytest.mark.parametrize(
    "value, message",
    [
        (5, "must be a string or a list of messages"),
        ([], "empty"),
        (["hi"], "message 0 must be an object"),
        ([{"role": "user"}], "message 0 has no 'content'"),
        ([{"content": "x"}], "message 0 has no 'role'"),
        ([{"role": "user", "content": "a"}, {"role": 1, "content": "b"}], "message 1: 'role' must be a string"),
        ([{"role": "user", "content": [{"type": "text", "text": "x"}]}], "content blocks"),
        ([{"role": "", "content": "x"}], "'role' is empty"),
    ],
)
def test_validate_messages_errors(value, message):
    with pytest.raises(ValueError, match=message):
        validate_messages(value)


def test_validate_messages_ok():
    assert validate_messages("hi") == [{"role": "user", "content": "hi"}]
    given = [{"role": "system", "content": "s", "name": "x"}, {"role": "user", "content": "u"}]
    out = validate_messages(given)
    assert out == given and out is not given and out[0] is not given[0]


# ---------------------------------------------------------------- read_jsonl and encode_prompts


def test_read_jsonl_message_prompts(tmp_path):
    path = tmp_path / "chat.jsonl"
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1="}]
    path.write_text(
        "\n".join(
            [
                json.dumps({"prompt": conversation, "answer": "2"}),
                json.dumps({"prompt": "2+2=", "answer": "4"}),
            ]
        )
        + "\n"
    )
    examples = read_jsonl(str(path))
    assert examples[0]["prompt"] == conversation and examples[1]["prompt"] == "2+2="


@pytest.mark.parametrize(
    "prompt, message",
    [
        ([{"role": "user"}], r"bad.jsonl:2: 'prompt' is not a valid message list: message 0 has no 'content'"),
        ([], r"bad.jsonl:2: 'prompt' is not a valid message list: the message list is empty"),
        ({"role": "user", "content": "x"}, r"bad.jsonl:2: 'prompt' must be a string, got dict"),
    ],
)
def test_read_jsonl_bad_message_prompt(tmp_path, prompt, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"prompt": "ok", "answer": "a"}) + "\n" + json.dumps({"prompt": prompt, "answer": "a"}) + "\n"
    )
    with pytest.raises(DataError, match=message):
        read_jsonl(str(path))


def test_encode_prompts_bucketing():
    tokenizer = CharTokenizer()
    # Lengths with BOS: 3, 6, 1 -> longest 6.
    tokens, valid = encode_prompts(tokenizer, ["ab", "abcde", ""], max_prompt_tokens=16, bucket_tokens=4)
    assert tokens.shape == valid.shape == (3, 8)  # 6 rounded up to 8
    np.testing.assert_array_equal(valid.sum(axis=1), [3, 6, 1])
    assert not valid[:, :2].any() and valid[:, -1].all()  # left padding
    assert [tokenizer.decode(row) for row in tokens] == ["ab", "abcde", ""]
    assert encode_prompts(tokenizer, ["abcdefg"], max_prompt_tokens=16, bucket_tokens=4)[0].shape == (1, 8)
    capped = encode_prompts(tokenizer, ["abcdefgh"], max_prompt_tokens=10, bucket_tokens=8)[0]
    assert capped.shape == (1, 10)  # 9 tokens -> 16, capped at max_prompt_tokens
    assert encode_prompts(tokenizer, ["abc"], max_prompt_tokens=10, bucket_tokens=1)[0].shape == (1, 4)
    default = encode_prompts(tokenizer, ["ab", "abcd"], max_prompt_tokens=8)
    explicit = encode_prompts(tokenizer, ["ab", "abcd"], max_prompt_tokens=8, bucket_tokens=1)
    np.testing.assert_array_equal(default[0], explicit[0])
    with pytest.raises(DataError, match="bucket_tokens"):
        encode_prompts(tokenizer, ["a"], max_prompt_tokens=8, bucket_tokens=0)


def test_encode_prompts_chat(pairs):
    qwen, ref = pairs["qwen"]
    prompts = ["1+1=", [{"role": "system", "content": "S"}, {"role": "user", "content": "2+2="}]]
    tokens, valid = encode_prompts(
        qwen, prompts, max_prompt_tokens=200, chat=True, system_prompt="Be exact.", bucket_tokens=16
    )
    first = _ids(
        ref.apply_chat_template(
            [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "1+1="}],
            add_generation_prompt=True,
        )
    )
    second = _ids(ref.apply_chat_template(prompts[1], add_generation_prompt=True))
    width = -(-max(len(first), len(second)) // 16) * 16
    assert tokens.shape == (2, width)
    assert tokens[0, valid[0]].tolist() == first and tokens[1, valid[1]].tolist() == second
    assert (tokens[~valid] == qwen.pad_id).all()
    limit = len(first) + 2
    with pytest.raises(
        DataError,
        match=rf"prompt 1 is \d+ tokens \(chat template included\), over the limit "
        rf"max_prompt_tokens={limit}: 2 messages, last 'and a much longer",
    ):
        encode_prompts(
            qwen,
            ["1+1=", [{"role": "user", "content": "and a much longer prompt, surely"}] * 2],
            max_prompt_tokens=limit,
            chat=True,
            system_prompt="Be exact.",
        )
    with pytest.raises(DataError, match="prompt 1: .*enable data.chat_template"):
        encode_prompts(qwen, prompts, max_prompt_tokens=200)
    with pytest.raises(DataError, match="no tokens"):
        encode_prompts(qwen, [""], max_prompt_tokens=200)  # Qwen has no BOS


def test_char_tokenizer_encode_prompt_unchanged():
    tokenizer = CharTokenizer()
    for text in ["", "ab", "3 5 7>22=", "ü?"]:
        assert tokenizer.encode_prompt(text) == tokenizer.encode(text, add_bos=True)
        expected = [1] + tokenizer.encode(text, add_bos=False)
        assert tokenizer.encode_prompt(text, chat=False, system_prompt=None) == expected
    assert tokenizer.eos_ids == (tokenizer.eos_id,) == (2,)
    assert tokenizer.has_chat_template is False
    with pytest.raises(ValueError, match="no chat template"):
        tokenizer.encode_prompt("ab", chat=True)
    with pytest.raises(ValueError, match="string prompts"):
        tokenizer.encode_prompt([{"role": "user", "content": "ab"}])
    with pytest.raises(ValueError, match="system prompt"):
        tokenizer.encode_prompt("ab", system_prompt="s")
    tokens, valid = encode_prompts(tokenizer, ["ab", "abcd", ""], max_prompt_tokens=8)
    a, b, c, d = tokenizer.encode("abcd", add_bos=False)
    np.testing.assert_array_equal(tokens, [[0, 0, 1, a, b], [1, a, b, c, d], [0, 0, 0, 0, 1]])
