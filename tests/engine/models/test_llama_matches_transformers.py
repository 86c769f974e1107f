"""The engine's Llama equals `transformers` LlamaForCausalLM on the same tiny random checkpoint (fp32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_driver import PagedDriver, hf_greedy, hf_logits
from recipe.engine.models.registry import load_model

ATOL = 1e-4
PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11]


@pytest.fixture(scope="module")
def pair(tiny_llama_dir: Path):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    model, info = load_model(tiny_llama_dir)
    return model, info, hf


def test_model_info_describes_the_checkpoint(pair) -> None:
    _, info, _ = pair
    assert info.architecture == "llama"
    assert (info.vocab_size, info.num_layers, info.hidden_size) == (256, 3, 64)
    assert (info.num_kv_heads, info.head_dim, info.eos_token_ids, info.bos_token_id) == (2, 16, (2,), 1)


def test_prefill_and_every_decode_step_match_transformers(pair) -> None:
    model, _, hf = pair
    steps = [9, 81, 240, 4, 4, 160, 31, 2]
    ref = hf_logits(hf, PROMPT + steps)
    drv = PagedDriver(model, num_seqs=1, max_len=64)
    got = drv.step([(0, PROMPT)])
    torch.testing.assert_close(got, ref[: len(PROMPT)], atol=ATOL, rtol=0)
    for i, tok in enumerate(steps):
        got = drv.step([(0, [tok])])[0]
        torch.testing.assert_close(got, ref[len(PROMPT) + i], atol=ATOL, rtol=0)


def test_greedy_output_equals_transformers_generate(pair) -> None:
    model, _, hf = pair
    expected = hf_greedy(hf, PROMPT, 24)
    drv = PagedDriver(model, num_seqs=1, max_len=64)
    nxt = int(drv.step([(0, PROMPT)])[-1].argmax())
    out = []
    for _ in range(24):
        out.append(nxt)
        nxt = int(drv.step([(0, [nxt])])[0].argmax())
    assert out == expected
    assert len(set(out)) > 3  # a checkpoint that repeats one token would prove little


def test_chunked_prefill_equals_whole_prefill(pair) -> None:
    model, _, _ = pair
    whole = PagedDriver(model, num_seqs=1, max_len=64).step([(0, PROMPT)])
    drv = PagedDriver(model, num_seqs=1, max_len=64)
    chunks = [drv.step([(0, PROMPT[a:b])]) for a, b in ((0, 5), (5, 6), (6, 13))]
    torch.testing.assert_close(torch.cat(chunks), whole, atol=1e-5, rtol=0)


def test_mixed_batch_equals_each_sequence_alone(pair) -> None:
    """Decode rows of different context lengths and a prefill chunk in one step, against full recompute."""
    model, _, hf = pair
    prompts = [PROMPT, PROMPT[:4], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]]
    drv = PagedDriver(model, num_seqs=4, max_len=64, shuffle_seed=3)
    drv.step([(i, p) for i, p in enumerate(prompts)])
    # Decode for sequences 0-2 while sequence 3 prefills its second chunk after a cached first chunk.
    late = [77, 78, 79, 80, 81, 82, 83]
    drv.step([(3, late[:3])])
    got = drv.step([(0, [50]), (3, late[3:]), (1, [60]), (2, [70])])
    rows = {0: 0, 3: slice(1, 5), 1: 5, 2: 6}
    torch.testing.assert_close(got[rows[0]], hf_logits(hf, [*PROMPT, 50])[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[rows[1]], hf_logits(hf, [*PROMPT[:4], 60])[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[rows[2]], hf_logits(hf, [*prompts[2], 70])[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[rows[3]], hf_logits(hf, late)[3:], atol=ATOL, rtol=0)


def test_batched_decode_equals_single_sequence_decode(pair) -> None:
    model, _, _ = pair
    prompts = [PROMPT, PROMPT[:3], PROMPT[2:], [9] * 21]
    batch = PagedDriver(model, num_seqs=4, max_len=64)
    batch.step([(i, p) for i, p in enumerate(prompts)])
    together = batch.step([(i, [40 + i]) for i in range(4)])
    for i, p in enumerate(prompts):
        alone = PagedDriver(model, num_seqs=1, max_len=64)
        alone.step([(0, p)])
        torch.testing.assert_close(together[i], alone.step([(0, [40 + i])])[0], atol=1e-5, rtol=0)


def test_bf16_weights_and_cache_stay_close_to_fp32(tiny_llama_dir: Path, pair) -> None:
    model32, _, _ = pair
    model16, info = load_model(tiny_llama_dir, dtype="bf16")
    assert info.dtype == torch.bfloat16 and model16.embed_tokens.weight.dtype == torch.bfloat16
    ref = PagedDriver(model32, num_seqs=1, max_len=32).step([(0, PROMPT)])
    got = PagedDriver(model16, num_seqs=1, max_len=32, cache_dtype=torch.bfloat16).step([(0, PROMPT)])
    assert got.dtype == torch.float32
    assert (got - ref).abs().max() < 0.1
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8


def test_biases_tied_embeddings_and_llama3_rope_match_transformers(tiny_llama_variant_dir: Path) -> None:
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(tiny_llama_variant_dir, dtype=torch.float32).eval()
    model, info = load_model(tiny_llama_variant_dir)
    assert model.lm_head is None and model.layers[0].self_attn.qkv.bias is not None
    assert info.eos_token_ids == (2, 3)
    long_prompt = [(7 * i + 3) % 256 for i in range(90)]  # past original_max_position_embeddings (64)
    ref = hf_logits(hf, long_prompt)
    drv = PagedDriver(model, num_seqs=1, max_len=96)
    torch.testing.assert_close(drv.step([(0, long_prompt[:80])]), ref[:80], atol=ATOL, rtol=0)
    for i in range(80, 90):
        torch.testing.assert_close(drv.step([(0, [long_prompt[i]])])[0], ref[i], atol=ATOL, rtol=0)
