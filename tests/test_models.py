"""Character tokenizer and tiny model: round trips through plain HF folders and Auto classes."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from replication.models import (
    ALPHABET,
    TinyModelConfig,
    build_char_tokenizer,
    build_tiny_model,
    count_parameters,
    load_policy,
    make_formatter,
    save_policy,
)
from replication.tasks import Prompt


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tok = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tok)
    return save_policy(model, tok, tmp_path_factory.mktemp("tiny")), model, tok


def test_tokenizer_round_trip():
    tok = build_char_tokenizer()
    for text in ["42-25=", "123+456=-579", "9*9=81", "(1+2) = 3.0"]:
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1  # one id per character
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode(tok("7")["input_ids"] + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == "7"
    assert tok("x")["input_ids"][1] == tok.unk_token_id
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}) == 4
    assert len(tok) == 4 + len(ALPHABET)


def test_auto_tokenizer_reload(folder):
    path, _, tok = folder
    again = AutoTokenizer.from_pretrained(path)
    assert again("42-25=")["input_ids"] == tok("42-25=")["input_ids"]
    assert (again.eos_token_id, again.pad_token_id, again.bos_token_id) == (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id)
    # written so that transformers 4.x, which has no "TokenizersBackend", loads it too
    assert json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_tiny_model_size_and_reload(folder):
    path, model, tok = folder
    assert 0.4e6 < count_parameters(model) < 0.46e6
    again = AutoModelForCausalLM.from_pretrained(path)
    assert type(again).__name__ == "LlamaForCausalLM"
    x = torch.tensor([tok("12+34=")["input_ids"]])
    torch.testing.assert_close(again(x).logits, model(x).logits)


def test_load_policy(folder):
    path, model, _ = folder
    m, tok = load_policy(path, device="cpu", dtype="bfloat16")
    assert m.dtype == torch.bfloat16 and not m.training and tok.pad_token_id is not None
    with pytest.raises(ValueError, match="dtype"):
        load_policy(path, dtype="float8")


def test_build_is_seeded_and_qwen2_works():
    tok = build_char_tokenizer()
    a = build_tiny_model(TinyModelConfig(init_seed=3), tok)
    b = build_tiny_model(TinyModelConfig(init_seed=3), tok)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    q = build_tiny_model(TinyModelConfig(arch="qwen2", layers=1), tok)
    assert type(q).__name__ == "Qwen2ForCausalLM"
    with pytest.raises(ValueError, match="arch"):
        TinyModelConfig(arch="gpt9")


def test_formatters():
    p = Prompt("x-1", "4+3=", "7", "chain_sum", "add1", "State the final answer: 4 + 3 =")
    raw = make_formatter("raw")
    assert raw(p) == "4+3=" and raw.add_special_tokens

    class FakeChat:  # stands in for a chat tokenizer's apply_chat_template
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "|".join(f"{m['role']}:{m['content']}" for m in messages) + ("|assistant:" if add_generation_prompt else "")

    chat = make_formatter("chat", FakeChat(), system="be brief")
    assert chat(p) == "system:be brief|user:State the final answer: 4 + 3 =|assistant:"
    assert not chat.add_special_tokens
    with pytest.raises(ValueError):
        make_formatter("chat")
