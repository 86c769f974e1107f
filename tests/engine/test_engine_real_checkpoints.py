"""The whole engine on real architectures (tiny random checkpoints written by `transformers`, loaded by the
models part): batched, chunked, paged, prefix-cached, asynchronous greedy decoding equals `transformers`'
greedy decoding of each prompt alone, with no cache at all."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from recipe.engine import LLM, SamplingParams

_GREEDY: dict[tuple[Path, tuple[int, ...], int], list[int]] = {}
_HF: dict[Path, torch.nn.Module] = {}


def transformers_greedy(path: Path, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy decoding with `transformers` and its own KV cache (fp32, batch of one)."""
    key = (path, tuple(prompt), max_tokens)
    if key not in _GREEDY:
        model = _hf(path)
        out: list[int] = []
        with torch.inference_mode():
            step = model(torch.tensor([prompt]), use_cache=True)
            for _ in range(max_tokens):
                out.append(int(step.logits[0, -1].argmax()))
                step = model(torch.tensor([[out[-1]]]), cache=step.past_key_values, use_cache=True)
        _GREEDY[key] = out
    return _GREEDY[key]


def _hf(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    if path not in _HF:
        _HF[path] = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return _HF[path]


def prompts(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [3, 17, 40, 64, 9, 33]
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


@pytest.mark.parametrize("checkpoint", ["llama_checkpoint", "deepseek_checkpoint"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_engine_greedy_equals_transformers(checkpoint: str, async_scheduling: bool,
                                           request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(checkpoint)
    llm = LLM(str(path), dtype="float32", num_kv_blocks=64, block_size=16, max_num_batched_tokens=48,
              async_scheduling=async_scheduling, num_threads=1)
    ps = prompts(1)
    shared = [ps[3] + [5, 6, 7], ps[3] + [9]]  # prefix-cache hits on a real model
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    outs = llm.generate(ps, params) + llm.generate(shared, params)
    assert [o.cached_tokens for o in outs[-2:]] == [64, 64]
    for prompt, out in zip(ps + shared, outs, strict=True):
        assert list(out.new_token_ids) == transformers_greedy(path, prompt, 12)
    assert llm.engine.block_manager.num_free_blocks == 64
    llm.shutdown()


def test_mla_pool_is_sized_from_the_compressed_cache(deepseek_checkpoint: Path, llama_checkpoint: Path) -> None:
    budget = 4 << 20
    mla = LLM(str(deepseek_checkpoint), kv_cache_bytes=budget, block_size=16, num_threads=1)
    per_block = mla.engine.model.kv_bytes_per_block(16, torch.float32)
    # MLA stores one latent row of kv_lora_rank + qk_rope_head_dim per token and layer: (32 + 8) * 4 bytes * 2 layers
    assert per_block == 16 * (32 + 8) * 4 * 2
    assert mla.engine.block_manager.num_blocks == budget // per_block
    mla.shutdown()
