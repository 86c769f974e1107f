"""The engine's DeepSeek-V4 equals `transformers` 5.24 (fp32, atol 1e-4) on tiny random checkpoints: prefill
(whole or chunked) and every greedy decode step, past the sliding window and several compression
boundaries of both compressed kinds, two layer-type patterns, hash- and score-routed MoE; with window blocks
released as they slide out, and with several sequences in one step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from v4_checkpoints import PATTERNS, V4Driver, load_engine_v4, write_v4_checkpoint

ATOL = 1e-4
PROMPT, DECODE = 21, 20  # window 8, rates 2/4 and 8: 41 tokens cross 5 HCA and 10-20 CSA boundaries


@pytest.fixture(scope="module", params=sorted(PATTERNS))
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, write_v4_checkpoint(tmp_path_factory.mktemp(f"v4_{request.param}"), request.param)


def reference(path: Path, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """transformers' greedy continuation and its logits: [prompt logits, then one row per decode step]."""
    from transformers import DeepseekV4ForCausalLM, DynamicCache

    hf = DeepseekV4ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    cache = DynamicCache(config=hf.config)
    tokens = list(prompt)
    with torch.no_grad():
        logits = [hf(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True).logits[0]]
        for _ in range(steps):
            tokens.append(int(logits[-1][-1].argmax()))
            logits.append(hf(input_ids=torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True).logits[0])
    return tokens, logits


@pytest.fixture(scope="module")
def greedy_run(checkpoint: tuple[str, Path]) -> tuple[list[int], list[int], list[torch.Tensor]]:
    prompt = torch.randint(2, 96, (PROMPT,), generator=torch.Generator().manual_seed(7)).tolist()
    tokens, ref = reference(checkpoint[1], prompt, DECODE)
    return prompt, tokens, ref


@pytest.mark.parametrize("chunk", [PROMPT, pytest.param(5, marks=pytest.mark.slow), 1])
def test_prefill_and_every_decode_step_match(checkpoint: tuple[str, Path], greedy_run: tuple[list[int], list[int],
                                             list[torch.Tensor]], chunk: int) -> None:
    """Exact ties in the indexer's top-k would make the reference itself ambiguous; the tiny config uses 8
    indexer heads so that a score of exactly 0 (every head's ReLU at 0) does not occur."""
    pattern, path = checkpoint
    prompt, tokens, ref = greedy_run
    driver = V4Driver(load_engine_v4(path))
    got = [torch.cat([driver.step([(0, p, prompt[p : p + chunk])])[0] for p in range(0, PROMPT, chunk)])]
    for i in range(DECODE):
        got.append(driver.step([(0, PROMPT + i, [tokens[PROMPT + i]])])[0])
    assert driver.released > 0, "the window never slid past a whole block"
    for step, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert torch.allclose(a, b, atol=ATOL, rtol=0), f"{pattern}, step {step}: {(a - b).abs().max():.2e}"
    assert float(ref[0].std()) > 0.3, "logits too flat to prove anything"


def test_batched_sequences_match_alone(checkpoint: tuple[str, Path]) -> None:
    """Two sequences at different positions in one step (one prefilling, one decoding) give the logits each
    gives alone."""
    _, path = checkpoint
    g = torch.Generator().manual_seed(3)
    a, b = torch.randint(2, 96, (30,), generator=g).tolist(), torch.randint(2, 96, (17,), generator=g).tolist()
    alone = V4Driver(load_engine_v4(path))
    ref_a = [*alone.step([(0, 0, a[:20])]), alone.step([(0, 20, a[20:])])[0]]
    ref_b = alone.step([(1, 0, b)])
    together = V4Driver(load_engine_v4(path))
    together.step([(0, 0, a[:20])])
    got_a, got_b = together.step([(0, 20, a[20:]), (1, 0, b)])
    assert torch.allclose(got_a, ref_a[1], atol=ATOL, rtol=0)
    assert torch.allclose(got_b, ref_b[0], atol=ATOL, rtol=0)
