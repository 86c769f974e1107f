"""The engine's DeepSeek-V4 equals `transformers` 5.24 (fp32, atol 1e-4) on tiny random checkpoints: prefill
(whole or chunked) and every greedy decode step, past the sliding window and several compression
boundaries of both compressed kinds, two layer-type patterns, hash- and score-routed MoE; with window blocks
released as they slide out, and with several sequences in one step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_batched_decode_matches_transformers(checkpoint: tuple[str, Path], greedy_run: tuple[list[int], list[int],
                                             list[torch.Tensor]]) -> None:
    """The "batched" attention backend's decode rows (`v4_decode_rows.py`) give transformers' logits too."""
    pattern, path = checkpoint
    prompt, tokens, ref = greedy_run
    driver = V4Driver(load_engine_v4(path), batched=True)
    got = [driver.step([(0, 0, prompt)])[0]]
    got += [driver.step([(0, PROMPT + i, [tokens[PROMPT + i]])])[0] for i in range(DECODE)]
    for step, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert torch.allclose(a, b, atol=ATOL, rtol=0), f"{pattern}, step {step}: {(a - b).abs().max():.2e}"


def test_batched_decode_equals_the_reference(checkpoint: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight sequences at staggered positions (prompts of 1 to 30 tokens, so rows complete compression
    windows at different steps), one of them prefilling in a step of decodes and a 1-token prompt among
    prefills: the batched decode rows give the per-sequence reference's logits (fp32 rounding only) and the
    same greedy tokens."""
    from recipe.engine.layers.v4_attention import V4Attention

    batched_rows = []
    attend_decode = V4Attention._attend_decode

    def spy(self: V4Attention, decode: Any, *args: Any) -> torch.Tensor:
        batched_rows.append(len(decode.spans))
        return attend_decode(self, decode, *args)

    monkeypatch.setattr(V4Attention, "_attend_decode", spy)
    pattern, path = checkpoint
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(2, 96, (n,), generator=g).tolist() for n in (1, 3, 7, 8, 15, 16, 21, 30)]
    reference, batched = V4Driver(load_engine_v4(path)), V4Driver(load_engine_v4(path), batched=True)
    tokens = [list(p) for p in prompts]
    late = 1  # prefills (3 tokens) at step 3, among decode rows; the 1-token prompt is a decode row at once
    early = [i for i in range(8) if i != late]
    first = [reference.step([(i, 0, prompts[i]) for i in early]), batched.step([(i, 0, prompts[i]) for i in early])]
    for i, a, b in zip(early, *first, strict=True):
        assert torch.allclose(a, b, atol=ATOL, rtol=0)
        tokens[i].append(int(a[-1].argmax()))
    for step in range(16):
        work = [(i, len(tokens[i]) - 1, [tokens[i][-1]]) for i in range(8) if i != late or step > 3]
        if step == 3:
            work.insert(late, (late, 0, prompts[late]))
        want, got = reference.step(work), batched.step(work)
        for (seq, _, _), a, b in zip(work, want, got, strict=True):
            assert torch.allclose(a, b, atol=ATOL, rtol=0), f"{pattern}, step {step}: {(a - b).abs().max():.2e}"
            assert int(a[-1].argmax()) == int(b[-1].argmax())
            tokens[seq].append(int(a[-1].argmax()))
    assert reference.released > 0 and batched.released == reference.released
    assert set(batched_rows) == {1, 7, 8}, "the batched path did not run on every kind of step"
