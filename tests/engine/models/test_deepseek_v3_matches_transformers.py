"""The engine's DeepSeek-V3 (MLA over the compressed cache, grouped-top-k MoE) equals `transformers`
DeepseekV3ForCausalLM on the same tiny random checkpoints (fp32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_driver import PagedDriver, hf_greedy, hf_logits
from recipe.engine.models.registry import load_model

ATOL = 1e-4
PROMPT = [3, 200, 17, 42, 99, 5, 250, 7, 128, 64, 33, 11, 90, 91]
STEPS = [9, 81, 240, 4, 160, 31, 2, 2]


def _pair(path: Path):
    from transformers import DeepseekV3ForCausalLM

    hf = DeepseekV3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model, info = load_model(path)
    return model, info, hf


@pytest.fixture(scope="module")
def pair(tiny_deepseek_dir: Path):
    return _pair(tiny_deepseek_dir)


@pytest.fixture(scope="module")
def yarn_pair(tiny_deepseek_yarn_dir: Path):
    return _pair(tiny_deepseek_yarn_dir)


def _check_prefill_and_decode(model, hf) -> None:
    ref = hf_logits(hf, PROMPT + STEPS)
    drv = PagedDriver(model, num_seqs=1, max_len=64)
    torch.testing.assert_close(drv.step([(0, PROMPT)]), ref[: len(PROMPT)], atol=ATOL, rtol=0)
    for i, tok in enumerate(STEPS):
        torch.testing.assert_close(drv.step([(0, [tok])])[0], ref[len(PROMPT) + i], atol=ATOL, rtol=0)


def test_prefill_and_every_decode_step_match_transformers(pair) -> None:
    model, _, hf = pair
    _check_prefill_and_decode(model, hf)


def test_yarn_half_split_rope_without_q_lora_matches_transformers(yarn_pair) -> None:
    model, _, hf = yarn_pair
    assert model.config.q_lora_rank is None and not model.config.rope_interleave
    assert model.rotary.scale == pytest.approx(1.0) and model.config.softmax_scale != 24**-0.5
    _check_prefill_and_decode(model, hf)


def test_greedy_output_equals_transformers_generate(pair) -> None:
    model, _, hf = pair
    expected = hf_greedy(hf, PROMPT, 20)
    drv = PagedDriver(model, num_seqs=1, max_len=64)
    nxt = int(drv.step([(0, PROMPT)])[-1].argmax())
    out = []
    for _ in range(20):
        out.append(nxt)
        nxt = int(drv.step([(0, [nxt])])[0].argmax())
    assert out == expected
    assert len(set(out)) > 3


def test_routing_uses_groups_and_many_experts(pair) -> None:
    """The checkpoint really exercises grouped routing: chosen experts lie in the allowed groups only,
    and the tokens of the prompt spread over most experts."""
    model, _, _ = pair
    moe = model.layers[1].mlp
    x = model.embed_tokens(torch.tensor(PROMPT))
    weights, ids = moe.gate(x)
    groups = ids // (moe.num_experts // moe.gate.n_group)
    assert all(len(set(g.tolist())) <= moe.gate.topk_group for g in groups)
    assert len(set(ids.flatten().tolist())) >= 6
    torch.testing.assert_close(weights.sum(-1), torch.full((len(PROMPT),), 2.5))


def test_chunked_prefill_and_mixed_batch_match(pair) -> None:
    model, _, hf = pair
    whole = PagedDriver(model, num_seqs=1, max_len=64).step([(0, PROMPT)])
    drv = PagedDriver(model, num_seqs=3, max_len=64, shuffle_seed=5)
    chunks = [drv.step([(0, PROMPT[a:b])]) for a, b in ((0, 6), (6, 7), (7, 14))]
    torch.testing.assert_close(torch.cat(chunks), whole, atol=1e-5, rtol=0)
    drv.step([(1, PROMPT[:5])])
    got = drv.step([(1, [70]), (0, [50]), (2, PROMPT[3:9])])
    torch.testing.assert_close(got[0], hf_logits(hf, [*PROMPT[:5], 70])[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[1], hf_logits(hf, [*PROMPT, 50])[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[2:], hf_logits(hf, PROMPT[3:9]), atol=ATOL, rtol=0)


def test_cache_holds_the_compressed_latent_only(pair) -> None:
    model, info, _ = pair
    c = model.config
    row = c.kv_lora_rank + c.qk_rope_head_dim
    assert (info.architecture, info.num_kv_heads, info.head_dim) == ("deepseek_v3", 1, row)
    assert model.kv_bytes_per_block(16, torch.float32) == c.num_layers * 16 * row * 4
    model.allocate_kv_cache(5, 16, torch.bfloat16, "cpu")
    assert model.layers[0].self_attn.cache.shape == (5, 16, 1, row)
    assert model.layers[0].self_attn.cache.dtype == torch.bfloat16


def test_router_stays_fp32_in_bf16(tiny_deepseek_dir: Path) -> None:
    model, _ = load_model(tiny_deepseek_dir, dtype=torch.bfloat16)
    gate = model.layers[1].mlp.gate
    assert gate.weight.dtype == torch.float32 and gate.e_score_correction_bias.dtype == torch.float32
    assert model.layers[1].mlp.w_gate_up.dtype == torch.bfloat16
    logits = PagedDriver(model, num_seqs=1, max_len=32, cache_dtype=torch.bfloat16).step([(0, PROMPT)])
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
