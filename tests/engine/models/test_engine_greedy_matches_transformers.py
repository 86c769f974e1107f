"""Through the whole engine (`LLM.generate`: scheduler, paged cache, continuous batching), greedy outputs of
both architectures equal `transformers.generate` on the same tiny checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_driver import hf_greedy

PROMPTS = [[3, 200, 17, 42, 99, 5, 250, 7], [9, 8, 7], list(range(10, 40))]


@pytest.mark.parametrize("decode_backend", ["fused", "layers"])  # the default, and its off switch
@pytest.mark.parametrize("which", ["llama", "deepseek_v3"])
def test_llm_generate_greedy_equals_transformers(which: str, decode_backend: str, tiny_llama_dir: Path,
                                                 tiny_deepseek_dir: Path) -> None:
    from recipe.engine import LLM, SamplingParams
    from transformers import DeepseekV3ForCausalLM, LlamaForCausalLM

    path = tiny_llama_dir if which == "llama" else tiny_deepseek_dir
    hf_cls = LlamaForCausalLM if which == "llama" else DeepseekV3ForCausalLM
    hf = hf_cls.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), decode_backend=decode_backend)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    llm.shutdown()
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert list(out.new_token_ids) == hf_greedy(hf, prompt, 12)
