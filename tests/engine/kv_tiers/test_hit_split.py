"""Per-tier hit counting: over a multi-turn trace replayed as the benchmark replays it (a measured first-token
call, then the rest of the answer as a second request), each measured request's per-tier split adds up to its
`cached_tokens`, and a tier is credited only for restored tokens a request used (never for a preempted
sequence's re-admission)."""

from __future__ import annotations

from pathlib import Path

import torch
from recipe.engine import SamplingParams
from recipe.engine.kv_tiers.hit_split import HitSplit
from test_engine_tiers import make, sessions

FIRST = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
REST = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def test_per_tier_split_adds_up_to_each_requests_cached_tokens(llama_checkpoint: Path, tmp_path: Path) -> None:
    trace = sessions(11, n=4, system=41)
    small = {"num_kv_blocks": 28, "async_scheduling": False}  # smaller than the working set
    warm = make(llama_checkpoint, kv_dir=str(tmp_path), **small)  # fills the directory tier
    for turns in trace:
        warm.generate([turns[0]], FIRST)
    warm.shutdown()
    llm = make(llama_checkpoint, kv_host_bytes=1 << 20, kv_dir=str(tmp_path), **small)
    total = HitSplit(0, ())
    history: dict[int, list[int]] = {}
    for turn in range(3):
        for s, turns in enumerate(trace):
            new = turns[turn][len(turns[turn - 1]):] if turn else turns[0]
            prompt = history.get(s, []) + new
            before = HitSplit.of(llm.engine.stats())
            out = llm.generate([prompt], FIRST)[0]
            got = HitSplit.of(llm.engine.stats()) - before
            assert got.prompt_tokens == len(prompt)
            assert got.cached_tokens == out.cached_tokens, got
            assert all(n >= 0 for _, n in got.served), got
            total = HitSplit(total.prompt_tokens + got.prompt_tokens,
                             tuple((name, n + dict(total.served).get(name, 0)) for name, n in got.served))
            rest = llm.generate([prompt + list(out.new_token_ids)], REST)[0]  # not measured: also cached
            history[s] = prompt + list(out.new_token_ids) + list(rest.new_token_ids)
    stats = llm.engine.stats()
    llm.shutdown()
    rates = {name: total.rate(name) for name, _ in total.served}
    assert set(rates) == {"device", "host", "disk"}
    assert rates["host"] > 0 and rates["disk"] > 0 and rates["device"] > 0  # every tier served this trace
    assert abs(sum(rates.values()) - total.cached_tokens / total.prompt_tokens) < 1e-12
    assert sum(rates.values()) <= 1.0
    whole = HitSplit.of(stats)  # both calls of every turn: the engine's own counters agree with themselves
    assert sum(n for name, n in whole.served if name != "device") == stats.restored_tokens
    assert 0.0 <= whole.conditional("disk") <= 1.0


def test_a_preempted_sequence_reloaded_from_the_host_tier_is_not_a_new_hit(llama_checkpoint: Path) -> None:
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 256, (41,), generator=g).tolist() for _ in range(4)]
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    llm = make(llama_checkpoint, kv_host_bytes=1 << 20, num_kv_blocks=36, async_scheduling=False)
    outs = llm.generate(prompts, params)
    stats = llm.engine.stats()
    host = stats.kv_tiers.tiers[0]
    llm.shutdown()
    assert host.hits > 0  # preemption swapped KV out and loaded it back ...
    assert host.served_tokens == 0 and stats.restored_tokens == 0  # ... which serves no new prompt token
    assert HitSplit.of(stats).cached_tokens == sum(o.cached_tokens for o in outs)
