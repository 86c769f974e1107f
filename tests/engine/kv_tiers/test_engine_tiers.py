"""The engine with its lower KV tiers: restored KV is the recomputed KV bit for bit, greedy output is the
same with the tiers on and off (Llama and DeepSeek-V3 tiny checkpoints), damaged units are recomputed, and
`cached_tokens` counts every tier."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from recipe.engine import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
BS = 4


def make(path: Path, **config: object) -> LLM:
    base: dict[str, object] = {"dtype": "float32", "block_size": BS, "num_kv_blocks": 96,
                               "max_num_batched_tokens": 64, "num_threads": 1}
    return LLM(str(path), **{**base, **config})


def sessions(seed: int, n: int = 3, system: int = 37) -> list[list[list[int]]]:
    """Multi-turn sessions sharing a system prompt: each turn's prompt extends the previous one."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(3, 256, (system,), generator=g).tolist()
    out = []
    for _ in range(n):
        turns, prompt = [], list(shared)
        for _ in range(3):
            prompt = prompt + torch.randint(3, 256, (int(torch.randint(5, 19, (1,), generator=g)),), generator=g).tolist()
            turns.append(list(prompt))
        out.append(turns)
    return out


def replay(llm: LLM, trace: list[list[list[int]]]) -> list[list[int]]:
    """Turn by turn across sessions; each turn's prompt also carries the previous turn's answer."""
    answers: list[list[int]] = []
    last: dict[int, list[int]] = {}
    for turn in range(len(trace[0])):
        prompts = [trace[s][turn] + last.get(s, []) for s in range(len(trace))]
        outs = llm.generate(prompts, GREEDY)
        for s, o in enumerate(outs):
            last[s] = list(o.new_token_ids)
            answers.append(list(o.new_token_ids))
    return answers


def device_blocks(llm: LLM, prompt: list[int]) -> list[dict[str, torch.Tensor]]:
    """The KV of `prompt`'s full blocks as the engine's pool holds it now (found through the prefix cache)."""
    from recipe.engine.block_manager import chain_hash
    from recipe.engine.kv_tiers.layer_caches import LayerCaches

    bm = llm.engine.block_manager
    cache = getattr(llm.engine.runner, "kv_cache", None) or LayerCaches(llm.engine.model)
    kinds = sorted(getattr(cache, "kinds", None) or cache.tensors)
    out, h = [], b""
    for i in range((len(prompt) - 1) // BS):
        h = chain_hash(h, prompt[i * BS:(i + 1) * BS])
        block_id = bm.cached[h]
        out.append({kind: cache.read(kind, [block_id]).clone() for kind in kinds})
    return out


@pytest.mark.parametrize("checkpoint", ["llama_checkpoint", "deepseek_checkpoint"])
def test_restored_kv_is_bitwise_the_recomputed_kv(checkpoint: str, request: pytest.FixtureRequest,
                                                  tmp_path: Path) -> None:
    path = request.getfixturevalue(checkpoint)
    prompt = sessions(1, n=1, system=45)[0][0]
    writer = make(path, kv_dir=str(tmp_path))
    writer.generate([prompt], GREEDY)
    writer.shutdown()  # writes what is queued
    recompute = make(path)
    recompute.generate([prompt], GREEDY)
    expected = device_blocks(recompute, prompt)
    for config in ({"kv_dir": str(tmp_path)}, {"kv_dir": str(tmp_path), "kv_host_bytes": 1 << 22}):
        reader = make(path, **config)  # a fresh engine: its pool is empty, the directory is not
        out = reader.generate([prompt], GREEDY)[0]
        assert out.cached_tokens == len(expected) * BS
        assert reader.engine.stats().restored_tokens == len(expected) * BS
        got = device_blocks(reader, prompt)
        for a, b in zip(got, expected, strict=True):
            for kind in a:
                assert torch.equal(a[kind].view(torch.uint8), b[kind].view(torch.uint8)), kind
        reader.shutdown()
    recompute.shutdown()


@pytest.mark.parametrize("checkpoint", ["llama_checkpoint", "deepseek_checkpoint"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_greedy_is_the_same_with_tiers_on_and_off(checkpoint: str, async_scheduling: bool,
                                                  request: pytest.FixtureRequest, tmp_path: Path) -> None:
    path = request.getfixturevalue(checkpoint)
    trace = sessions(2)
    small = {"num_kv_blocks": 28, "async_scheduling": async_scheduling}  # smaller than the working set
    off = make(path, **small)
    expected = replay(off, trace)
    off.shutdown()
    on = make(path, kv_host_bytes=1 << 20, kv_dir=str(tmp_path), **small)
    assert replay(on, trace) == expected
    stats = on.engine.stats()
    assert stats.restored_tokens > 0  # the tiers served what the small pool had evicted
    host, disk = stats.kv_tiers.tiers
    assert host.hits > 0 and host.blocks_stored > 0 and disk.blocks_stored > 0
    on.engine.block_manager.check_invariants()
    on.shutdown()
    again = make(path, kv_dir=str(tmp_path), **small)  # a restart: only the directory remains
    assert replay(again, trace) == expected
    assert again.engine.stats().kv_tiers.tiers[0].hits > 0
    again.shutdown()


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 1
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing"])
def test_damaged_units_are_recomputed_with_the_same_output(damage: str, llama_checkpoint: Path,
                                                           tmp_path: Path) -> None:
    prompt = sessions(3, n=1, system=45)[0][0]
    writer = make(llama_checkpoint, kv_dir=str(tmp_path))
    expected = list(writer.generate([prompt], GREEDY)[0].new_token_ids)
    writer.shutdown()
    files = sorted((tmp_path).rglob("*.kv"), key=lambda p: p.stat().st_mtime)
    assert len(files) >= 5
    victim = files[len(files) // 2]
    if damage == "flip":
        _flip(victim)
    elif damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:100])
    else:
        victim.unlink()
    reader = make(llama_checkpoint, kv_dir=str(tmp_path))
    out = reader.generate([prompt], GREEDY)[0]
    assert list(out.new_token_ids) == expected
    disk = reader.engine.stats().kv_tiers.tiers[0]
    assert disk.corruptions == (0 if damage == "missing" else 1)
    assert 0 < out.cached_tokens < (len(prompt) - 1) // BS * BS  # the run stopped at the damaged block
    assert disk.enabled
    reader.shutdown()


def test_configuration_errors_are_clear(llama_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="need enable_prefix_caching"):
        make(llama_checkpoint, kv_dir=str(tmp_path), enable_prefix_caching=False)
    with pytest.raises(ValueError, match="kv_disk_bytes needs kv_dir"):
        make(llama_checkpoint, kv_disk_bytes=1 << 20)
    llm = make(llama_checkpoint, kv_dir=str(tmp_path), kv_retention=["batch=1h"])
    with pytest.raises(ValueError, match="unknown KV retention class"):
        llm.generate([[5, 6, 7]], SamplingParams(max_tokens=2, kv_retention="nope"))
    llm.generate([[5, 6, 7, 8, 9, 10, 11, 12, 13]], SamplingParams(max_tokens=2, kv_retention="batch"))
    llm.shutdown()
    classes = {__import__("recipe.engine.kv_tiers.unit", fromlist=["x"]).read_header(p.read_bytes()).retention_class
               for p in tmp_path.rglob("*.kv")}
    assert classes == {"batch"}


def test_preempted_sequences_come_back_from_the_host_tier(llama_checkpoint: Path) -> None:
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 256, (41,), generator=g).tolist() for _ in range(4)]
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    tight = {"num_kv_blocks": 36, "async_scheduling": False}  # 4 x 21 blocks at the end: preemption
    expected = [list(o.new_token_ids) for o in make(llama_checkpoint, **tight).generate(prompts, params)]
    on = make(llama_checkpoint, kv_host_bytes=1 << 20, **tight)
    preempted = []
    original = on.engine.scheduler._preempt

    def spy(seq):  # type: ignore[no-untyped-def]
        preempted.append(seq.num_computed_tokens)
        original(seq)

    on.engine.scheduler._preempt = spy  # type: ignore[method-assign]
    assert [list(o.new_token_ids) for o in on.generate(prompts, params)] == expected
    host = on.engine.stats().kv_tiers.tiers[0]
    assert preempted and host.hits > 0  # the preempted KV came back from host memory, not recomputed
    on.shutdown()
