"""Bounded replay on the V4 model: with the compressed entries of a prefix restored and its window rows lost,
replaying the last `exact_replay_tokens()` tokens rebuilds the window exactly (the logits after it equal an
uninterrupted run's within fp32 tolerance), never reads a window row below the replay, and never rewrites a
restored compressed entry; a replay shorter than that diverges (the margin is not loose)."""

from __future__ import annotations

import pytest
import torch
from recipe.engine.layers.v4_kv import RELEASED, V4Plan, V4Span
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from v4_checkpoints import load_engine_v4, write_v4_checkpoint

BS = 4
BLOCKS = 40  # per sequence and kind


@pytest.fixture(scope="module", params=["mixed", "default"])
def v4(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> DeepseekV4ForCausalLM:
    path = write_v4_checkpoint(tmp_path_factory.mktemp(f"v4_replay_{request.param}"), request.param, seed=3)
    return load_engine_v4(path, num_blocks=4 * BLOCKS, block_size=BS)


def tables(model: DeepseekV4ForCausalLM, slot: int) -> dict[str, torch.Tensor]:
    return {s.name: torch.arange(slot * BLOCKS, (slot + 1) * BLOCKS) for s in model.cache_specs()}


@torch.inference_mode()
def run(model: DeepseekV4ForCausalLM, ids: list[int], p0: int, p1: int, kinds: dict[str, torch.Tensor],
        window_from: int = 0, compressed_until: int = 0) -> torch.Tensor:
    span = V4Span(0, p1 - p0, p0, kinds, window_from, compressed_until)
    hidden = model(torch.tensor(ids[p0:p1]), torch.arange(p0, p1), V4Plan((span,), BS))
    return model.compute_logits(hidden)


def replayed(model: DeepseekV4ForCausalLM, ids: list[int], point: int, replay: int, chunk: int,
             slot: int) -> torch.Tensor:
    """Logits of positions [point, len(ids)) after a window miss at `point` and a replay of `replay` tokens."""
    kinds = tables(model, slot)
    run(model, ids, 0, point, kinds)  # the history whose compressed entries survive
    rates = {s.name: s.tokens_per_row for s in model.cache_specs()}

    def entries(k: str) -> torch.Tensor:  # the compressed entries of the history, flat
        pool = model.pools[k][kinds[k]]
        return pool.reshape(-1, pool.shape[-1])[: point // rates[k]].clone()

    compressed = {k: entries(k) for k in kinds if k != "window"}
    start = point - replay
    window = torch.arange((slot + 2) * BLOCKS, (slot + 3) * BLOCKS)  # fresh window blocks ...
    window[: start // BS] = RELEASED  # ... and none below the replay: reading one would fail
    model.pools["window"][window[start // BS:]] = float("nan")  # nor may a stale row leak in
    kinds = {**kinds, "window": window}
    out, p = [], start
    while p < len(ids):
        q = min(len(ids), p + chunk)
        out.append(run(model, ids, p, q, kinds, start, point))
        p = q
    for k, before in compressed.items():  # restored entries are read, never rewritten
        assert torch.equal(entries(k), before), k
    return torch.cat(out)[replay:]


@pytest.mark.parametrize("chunk", [9, 64])
def test_exact_margin_rebuilds_the_window_exactly(v4: DeepseekV4ForCausalLM, chunk: int) -> None:
    g = torch.Generator().manual_seed(chunk)
    ids = torch.randint(2, 96, (88,), generator=g).tolist()
    point = 64
    exact = v4.exact_replay_tokens()
    replay = -(-exact // BS) * BS
    assert replay < point
    whole = run(v4, ids, 0, len(ids), tables(v4, 0))[point:]
    got = replayed(v4, ids, point, replay, chunk, slot=1)
    assert torch.isfinite(got).all()
    assert (got - whole).abs().max().item() < 1e-4
    assert torch.equal(got.argmax(-1), whole.argmax(-1))


def test_a_replay_shorter_than_the_exact_margin_diverges(v4: DeepseekV4ForCausalLM) -> None:
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(2, 96, (80,), generator=g).tolist()
    point = 64
    short = (v4.exact_replay_tokens() // 2) // BS * BS
    whole = run(v4, ids, 0, len(ids), tables(v4, 0))[point:]
    got = replayed(v4, ids, point, short, 16, slot=1)
    assert (got - whole).abs().max().item() > 1e-3


def test_exact_margin_of_the_layer_pattern(v4: DeepseekV4ForCausalLM) -> None:
    layers = v4.decoder_layers()
    w = v4.config.sliding_window
    assert v4.exact_replay_tokens() == max(a.self_attn.lookback for a in layers) + (len(layers) - 1) * (w - 1)
