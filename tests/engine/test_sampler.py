"""The sampler against `transformers`' logits processors (the oracle) and the OpenAI penalty formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from recipe.engine.sampler import Sampler, SamplingRow, unpack_bitmask
from recipe.engine.sampling_params import SamplingParams
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

V = 300


def hf_process(logits: torch.Tensor, params: SamplingParams, context: list[int]) -> torch.Tensor:
    x = logits.unsqueeze(0).clone()
    ids = torch.tensor([context])
    if params.repetition_penalty != 1.0:
        x = RepetitionPenaltyLogitsProcessor(params.repetition_penalty)(ids, x)
    if params.greedy:
        return x[0]
    x = TemperatureLogitsWarper(params.temperature)(ids, x)
    if params.top_k > 0:
        x = TopKLogitsWarper(params.top_k)(ids, x)
    if params.top_p < 1.0:
        x = TopPLogitsWarper(params.top_p)(ids, x)
    if params.min_p > 0.0:
        x = MinPLogitsWarper(params.min_p)(ids, x)
    return x[0]


PARAM_GRID = [
    SamplingParams(temperature=0.7),
    SamplingParams(temperature=1.3, top_k=17),
    SamplingParams(temperature=1.0, top_p=0.8),
    SamplingParams(temperature=0.5, min_p=0.05),
    SamplingParams(temperature=0.0, repetition_penalty=1.3),
    SamplingParams(temperature=0.9, top_k=40, top_p=0.7, min_p=0.01, repetition_penalty=1.15),
    SamplingParams(temperature=1.0, repetition_penalty=0.8),
    SamplingParams(temperature=1.0),
]


def test_mixed_batch_matches_transformers_processors_row_by_row() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(len(PARAM_GRID), V, generator=g) * 3
    contexts = [torch.randint(0, V, (int(n),), generator=g).tolist() for n in torch.randint(1, 40, (len(PARAM_GRID),))]
    rows = [SamplingRow(params=p, context_ids=c) for p, c in zip(PARAM_GRID, contexts, strict=True)]
    got = Sampler().process_logits(logits, rows)
    for i, p in enumerate(PARAM_GRID):
        expected = hf_process(logits[i], p, contexts[i])
        assert torch.equal(torch.isinf(got[i]), torch.isinf(expected)), p
        finite = ~torch.isinf(expected)
        torch.testing.assert_close(got[i][finite], expected[finite], rtol=1e-6, atol=1e-6)


def test_presence_and_frequency_penalties_follow_openai_formula() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, V, generator=g)
    outputs = [[5, 5, 7], [], [1, 2, 2, 2, 299]]
    params = [SamplingParams(temperature=0.0, presence_penalty=0.5, frequency_penalty=0.25),
              SamplingParams(temperature=0.0, presence_penalty=1.0),
              SamplingParams(temperature=0.0, frequency_penalty=-0.5, presence_penalty=2.0)]
    rows = [SamplingRow(params=p, output_ids=o) for p, o in zip(params, outputs, strict=True)]
    got = Sampler().process_logits(logits, rows)
    for i, (p, out) in enumerate(zip(params, outputs, strict=True)):
        expected = logits[i].clone()
        for tok in set(out):
            c = out.count(tok)
            expected[tok] -= c * p.frequency_penalty + p.presence_penalty  # OpenAI's documented formula
        torch.testing.assert_close(got[i], expected)


def test_bitmask_unpacks_like_numpy_and_masks_before_sampling() -> None:
    rng = np.random.default_rng(2)
    words = (V + 31) // 32
    packed = rng.integers(-(2**31), 2**31, size=(4, words), dtype=np.int64).astype(np.int32)
    allowed = unpack_bitmask(torch.from_numpy(packed), V)
    bits = np.unpackbits(packed.view(np.uint8), bitorder="little").reshape(4, -1)[:, :V].astype(bool)
    assert np.array_equal(allowed.numpy(), bits)
    logits = torch.randn(4, V)
    rows = [SamplingRow(params=SamplingParams(temperature=1.0, seed=i)) for i in range(2)]
    rows += [SamplingRow(params=SamplingParams(temperature=0.0)) for _ in range(2)]
    for trial in range(20):
        rows[0] = SamplingRow(params=SamplingParams(temperature=1.0, seed=trial))
        out = Sampler()(logits, rows, torch.from_numpy(packed))
        assert all(bits[r, t] for r, t in enumerate(out.token_ids))


def test_an_empty_mask_row_masks_nothing() -> None:
    logits = torch.randn(1, V)
    zero = torch.zeros(1, (V + 31) // 32, dtype=torch.int32)
    out = Sampler()(logits, [SamplingRow(params=SamplingParams(temperature=0.0))], zero)
    assert out.token_ids == [int(logits[0].argmax())]


def test_greedy_is_argmax_and_logprobs_are_the_raw_log_softmax() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, V, generator=g)
    rows = [SamplingRow(params=SamplingParams(temperature=0.0, logprobs=5)),
            SamplingRow(params=SamplingParams(temperature=0.5, top_k=3, logprobs=0, seed=1))]
    out = Sampler()(logits, rows)
    assert out.token_ids[0] == int(logits[0].argmax())
    lsm = torch.log_softmax(logits, dim=1)
    lp0 = out.logprobs[0]
    lp1 = out.logprobs[1]
    assert lp0 is not None and lp1 is not None
    assert lp0[0] == pytest.approx(float(lsm[0, out.token_ids[0]]), abs=1e-6)
    top = lsm[0].topk(5)
    assert [t for t, _ in lp0[1]] == top.indices.tolist()
    assert [v for _, v in lp0[1]] == pytest.approx(top.values.tolist(), abs=1e-6)
    assert lp1[1] == [] and lp1[0] == pytest.approx(float(lsm[1, out.token_ids[1]]), abs=1e-6)
    assert out.token_ids[1] in lsm[1].topk(3).indices.tolist()


def test_seeded_rows_are_reproducible_and_independent_of_batch_neighbours() -> None:
    logits = torch.randn(3, V)
    row = SamplingRow(params=SamplingParams(temperature=1.0, seed=42), index=0, position=17)
    a = Sampler()(logits[:1], [row]).token_ids[0]
    others = [SamplingRow(params=SamplingParams(temperature=1.0)), SamplingRow(params=SamplingParams(temperature=0.3))]
    b = Sampler()(logits[[1, 0, 2]], [others[0], row, others[1]]).token_ids[1]
    assert a == b
    draws = {Sampler()(logits[:1], [SamplingRow(params=row.params, position=p)]).token_ids[0] for p in range(40)}
    assert len(draws) > 1  # the position is part of the seed key


def test_sampling_follows_the_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0]])
    probs = logits.softmax(1)[0]
    n = 4000
    counts = torch.zeros(5)
    sampler = Sampler()
    for pos in range(n):
        tok = sampler(logits, [SamplingRow(params=SamplingParams(temperature=1.0, seed=7), position=pos)]).token_ids[0]
        counts[tok] += 1
    expected = probs * n
    chi2 = float((((counts - expected) ** 2) / expected.clamp(min=1e-9))[:4].sum())
    assert chi2 < 16.3  # chi-square, 3 degrees of freedom, p = 0.001
    assert counts[4] == 0
