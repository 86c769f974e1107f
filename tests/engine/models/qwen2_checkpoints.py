"""Tiny random Qwen2 checkpoints: a `transformers` Qwen2ForCausalLM saved as safetensors, and the same weights
written as a GGUF by `gguf.GGUFWriter` (F32, or quantised: Q8_0 by `gguf.quants.quantize`, the K-quants by the
encoders in `kquant_encode.py`, since gguf-py cannot quantise those). The GGUF's tokenizer is byte-level BPE over
the 256 byte symbols plus DeepSeek-R1's special tokens, so R1 prompts encode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

R1_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
               "</think>"]
VOCAB = 256 + len(R1_SPECIALS)
BOS, EOS = 256, 257
R1_TEMPLATE = "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}" \
              "{% else %}<｜Assistant｜>{{ m['content'] }}<｜end▁of▁sentence｜>{% endif %}{% endfor %}" \
              "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    extra = 0
    out = {}
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def make_hf_qwen2(seed: int, *, tied: bool, hidden: int = 256, inter: int = 512, layers: int = 2,
                  rope_theta: float = 1000000.0, vocab: int = VOCAB) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta}, tie_word_embeddings=tied,
        bos_token_id=BOS, eos_token_id=EOS, use_sliding_window=False,
    )
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # wider than the default init so logits differ visibly per token; biases non-zero
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.1)
            elif name.endswith("bias"):
                p.normal_(0, 0.5)
            else:
                p.normal_(1.0, 0.2)
    return model.eval()


def save_hf(model: Any, path: Path) -> Path:
    model.save_pretrained(path)
    return path


_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    return f"blk.{parts[2]}.{_GGUF_NAMES['.'.join(parts[3:])]}"


def make_hf_llama3(seed: int) -> Any:
    """A tiny Llama with llama3 RoPE scaling, as DeepSeek-R1-Distill-Llama-8B has."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=BOS, eos_token_id=EOS,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.1)
    return model.eval()


def _permute_rope_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's Q/K row order for llama (the inverse of the loader's `unpermute_rope_rows`)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama3_freq_factors(model: Any) -> np.ndarray:
    """rope_freqs.weight as llama.cpp's converter writes it: default inverse frequency / llama3's, per frequency."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    c = model.config
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](c, "cpu")
    base = float(c.rope_parameters["rope_theta"])
    dim = c.hidden_size // c.num_attention_heads
    default = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return (default / scaled).numpy().astype(np.float32)


def write_qwen2_gguf(model: Any, path: Path, qtypes: dict[str, Any] | Any = None, *,
                     chat_template: str = R1_TEMPLATE, pre: str = "deepseek-r1-qwen",
                     merges: tuple[str, ...] = ()) -> Path:
    """Write `model`'s weights as a qwen2 GGUF (a `transformers` Llama as a llama GGUF: Q/K rows permuted as
    llama.cpp does, llama3 RoPE as `rope_freqs.weight`). `qtypes`: one GGMLQuantizationType for every 2-D weight, or a
    {gguf-name suffix: type} map (e.g. {"attn_v.weight": Q6_K}) with "*" the default; None keeps F32.
    1-D tensors (norms, biases) stay F32, as llama.cpp writes them. Each of `merges` ("a b") appends the token "ab"
    after the specials (the model's vocabulary must count them): llama.cpp refuses a BPE file without merges, and
    gguf-py cannot write an empty array."""
    import gguf
    from kquant_encode import encode

    c = model.config
    arch = "llama" if c.model_type == "llama" else "qwen2"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_file_type(1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    merged = [m.replace(" ", "") for m in merges]
    tokens = byte_symbols() + R1_SPECIALS + merged
    assert len(tokens) == c.vocab_size, (len(tokens), c.vocab_size)
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3] * len(R1_SPECIALS) + [1] * len(merged))
    w.add_token_merges(list(merges))
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_chat_template(chat_template)
    if arch == "llama" and c.rope_parameters.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", _llama3_freq_factors(model))
    for hf, t in model.state_dict().items():
        name = gguf_name(hf)
        if hf == "lm_head.weight" and c.tie_word_embeddings:
            continue
        arr = t.detach().float().numpy()
        if arch == "llama" and ".q_proj." in hf:
            arr = _permute_rope_rows(arr, c.num_attention_heads)
        elif arch == "llama" and ".k_proj." in hf:
            arr = _permute_rope_rows(arr, c.num_key_value_heads)
        qtype = None
        if arr.ndim == 2 and qtypes is not None:
            if isinstance(qtypes, dict):
                qtype = next((q for s, q in qtypes.items() if s != "*" and name.endswith(s)), qtypes.get("*"))
            else:
                qtype = qtypes
        if qtype is None or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, np.ascontiguousarray(arr))
        else:
            w.add_tensor(name, encode(arr, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hf_with_gguf_weights(model: Any, gguf_path: Path) -> Any:
    """A copy of `model` whose weights are the GGUF's, dequantised by gguf-py (the oracle's weights)."""
    import copy

    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(str(gguf_path))
    by_name = {t.name: t for t in reader.tensors}
    out = copy.deepcopy(model)
    sd = out.state_dict()
    with torch.no_grad():
        for hf, t in sd.items():
            name = gguf_name(hf)
            if name not in by_name:
                name = "token_embd.weight"  # the tied head
            g = by_name[name]
            values = np.asarray(dequantize(g.data, g.tensor_type), dtype=np.float32).reshape(t.shape)
            t.copy_(torch.from_numpy(values.copy()))
    return out
