"""Hand-off through the KV connector (prefill engine -> `HandoffConnector` -> decode engine, in one process)
gives exactly the tokens of one colocated engine, for a Llama-style model and DeepSeek-V3 (MLA's latent
cache; one paged table each) and for DeepSeek-V4 (window and compressed kinds, window blocks released as they slide out): greedy, n > 1,
seeded sampling, a request that ends at its first token, a constraint replayed on the decode side, and
prefix-cache hits on the decode side (`skip_blocks`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from disagg_helpers import EvenTokens, reference
from handoff_pair import HandoffPair
from recipe.engine import LLM, SamplingParams
from v4_checkpoints import write_v4_checkpoint

LLAMA = {"dtype": "float32", "num_kv_blocks": 160, "block_size": 4, "num_threads": 1, "max_num_batched_tokens": 64}
V4 = {"num_kv_blocks": 96, "block_size": 4, "num_threads": 1, "max_num_seqs": 8, "max_num_batched_tokens": 16}


@pytest.fixture(scope="module", params=["llama", "deepseek_v3", "deepseek_v4"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if request.param in ("llama", "deepseek_v3"):  # one paged table: K/V ("full"), MLA's latent ("latent")
        path, config, vocab = request.getfixturevalue(f"{request.param.split('_')[0]}_checkpoint"), LLAMA, 256
    else:
        path, config, vocab = write_v4_checkpoint(tmp_path_factory.mktemp("v4_handoff"), "mixed", seed=3), V4, 96
    pair = HandoffPair.of(str(path), **config)
    colocated = LLM(str(path), **config)
    yield {"name": request.param, "pair": pair, "colocated": colocated, "vocab": vocab}
    pair.shutdown()
    colocated.shutdown()


def prompts_for(vocab: int, shared: int = 0, seed: int = 0) -> list[list[int]]:
    """Prompts of 1 to 37 tokens (past V4's window of 8 and compression rates 2 and 8), after `shared` tokens."""
    import random

    rng = random.Random(seed)
    head = [rng.randrange(3, vocab) for _ in range(shared)]
    return [head + [rng.randrange(3, vocab) for _ in range(n)] for n in (1, 6, 13, 22, 37)]


def params_for(vocab: int) -> list[SamplingParams]:
    return [SamplingParams(temperature=0.0, max_tokens=8),
            SamplingParams(temperature=0.0, max_tokens=6, n=2, ignore_eos=True),
            SamplingParams(temperature=1.0, seed=11, max_tokens=7, n=3, ignore_eos=True),
            SamplingParams(temperature=0.0, max_tokens=1),
            SamplingParams(temperature=0.0, max_tokens=9, constraint=EvenTokens(3, vocab))]


def check_pools(pair: HandoffPair) -> None:
    for engine in (pair.prefill, pair.decode):
        engine.block_manager.check_invariants()
        assert engine.block_manager.usage == 0.0, "a hand-off left blocks held"


def test_handoff_equals_a_colocated_engine(model: dict[str, Any]) -> None:
    pair, vocab = model["pair"], model["vocab"]
    prompts, params = prompts_for(vocab), params_for(vocab)
    got, _ = pair.generate(prompts, params, prefix="a")
    assert got == reference(model["colocated"], prompts, params)
    check_pools(pair)
    if model["name"] == "deepseek_v4":  # the payload skipped window blocks that slid out at prefill
        assert pair.prefill.block_manager.released_blocks > 0
        assert pair.decode.block_manager.released_blocks > 0


def test_decode_side_prefix_hits_skip_the_blocks_it_holds(model: dict[str, Any]) -> None:
    pair, vocab = model["pair"], model["vocab"]
    prompts = prompts_for(vocab, shared=24, seed=1)
    params = [SamplingParams(temperature=0.0, max_tokens=6, n=1 + i % 2, ignore_eos=True) for i in range(len(prompts))]
    want = reference(model["colocated"], prompts, params)
    first, _ = pair.generate(prompts, params, prefix="b")
    again, held = pair.generate(prompts, params, prefix="c")
    assert first == want and again == want
    assert all(h > 0 for h in held), held
    check_pools(pair)


def test_blocks_the_prefill_side_released_never_serve_a_later_prefix_hit(model: dict[str, Any]) -> None:
    """A long prompt handed off (two choices, sharing its blocks), then prompts sharing only its first 12
    tokens: on DeepSeek-V4 the decode side never received the window blocks that slid out at prefill, so
    neither choice may register them for a later match."""
    pair, vocab = model["pair"], model["vocab"]
    long = prompts_for(vocab, shared=30, seed=2)[4:]
    pair.generate(long, [SamplingParams(temperature=0.0, max_tokens=4, n=2, ignore_eos=True)], prefix="d")
    params = [SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)]
    short = [long[0][:12] + tail for tail in ([5, 7, 9], [11, 13, 15, 17, 19])]
    params = params * len(short)
    got, _ = pair.generate(short, params, prefix="e")
    assert got == reference(model["colocated"], short, params)
    check_pools(pair)


def test_a_model_whose_caches_the_engine_cannot_copy_refuses_to_hand_off() -> None:
    from recipe.engine.kv_connector.handoff_connector import HandoffConnector
    from recipe.engine.llm_engine import LLMEngine
    from tiny_paged_model import TinyInfo, TinyPagedLM

    connector = HandoffConnector()
    engine = LLMEngine((TinyPagedLM(), TinyInfo()), connector=connector, num_kv_blocks=8, block_size=4, num_threads=1)
    try:
        assert not connector.hands_off
        with pytest.raises(ValueError, match="both-role workers"):
            connector.reserve("x", [1, 2, 3], SamplingParams(max_tokens=2))
        with pytest.raises(ValueError, match="both-role workers"):
            connector.add_prefill("x", [1, 2, 3], SamplingParams(max_tokens=2), 0)
    finally:
        engine.shutdown()
