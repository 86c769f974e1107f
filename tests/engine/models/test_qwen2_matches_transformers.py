"""The engine's Qwen2 (q/k/v biases, no o_proj bias, tied or untied head, rope base 1e6) equals `transformers`
Qwen2ForCausalLM on tiny random checkpoints: from safetensors, and from an F32 GGUF of the same weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_driver import PagedDriver, hf_greedy, hf_logits
from qwen2_checkpoints import make_hf_qwen2, save_hf, write_qwen2_gguf
from recipe.engine.models.registry import load_model

ATOL = 1e-4
PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11, 256, 258]


@pytest.fixture(scope="module", params=["tied", "untied"])
def hf(request):
    return make_hf_qwen2(11 if request.param == "tied" else 12, tied=request.param == "tied")


@pytest.fixture(scope="module", params=["safetensors", "gguf"])
def loaded(request, hf, tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen2")
    source = save_hf(hf, path) if request.param == "safetensors" else write_qwen2_gguf(hf, path / "tiny.gguf")
    return load_model(source)


def test_model_info_describes_the_checkpoint(hf, loaded) -> None:
    model, info = loaded
    assert info.architecture == "qwen2"
    assert (info.vocab_size, info.num_layers, info.hidden_size, info.num_kv_heads, info.head_dim) == (262, 2, 256, 2, 64)
    assert model.config.qkv_bias and not model.config.attention_bias
    assert model.config.tie_word_embeddings == hf.config.tie_word_embeddings
    assert model.config.rope_parameters["rope_theta"] == 1000000.0
    assert model.decoder_layers()[0].self_attn.o_proj.bias is None


def test_prefill_and_decode_steps_match_transformers(hf, loaded) -> None:
    model, _ = loaded
    steps = [9, 81, 240, 4, 160, 31]
    ref = hf_logits(hf, PROMPT + steps)
    drv = PagedDriver(model, num_seqs=1, max_len=64)
    torch.testing.assert_close(drv.step([(0, PROMPT)]), ref[: len(PROMPT)], atol=ATOL, rtol=0)
    for i, tok in enumerate(steps):
        torch.testing.assert_close(drv.step([(0, [tok])])[0], ref[len(PROMPT) + i], atol=ATOL, rtol=0)


def test_greedy_output_equals_transformers_generate(hf, loaded) -> None:
    model, _ = loaded
    expected = hf_greedy(hf, PROMPT, 16)
    drv = PagedDriver(model, num_seqs=1, max_len=64)
    nxt = int(drv.step([(0, PROMPT)])[-1].argmax())
    out = []
    for _ in range(16):
        out.append(nxt)
        nxt = int(drv.step([(0, [nxt])])[0].argmax())
    assert out == expected
    assert len(set(out)) > 3


def test_r1_distill_gguf_is_served_with_the_r1_prompt_format(hf, tmp_path: Path) -> None:
    _, info = load_model(write_qwen2_gguf(hf, tmp_path / "r1.gguf"))
    assert info.chat_format == "deepseek_r1"
    _, plain = load_model(write_qwen2_gguf(hf, tmp_path / "plain.gguf", chat_template="{{ messages }}", pre="qwen2"))
    assert plain.chat_format == "chatml"
