"""DeepSeek-V4 through the whole engine (`LLM.generate`): greedy tokens equal `transformers.generate` with
continuous batching, chunked prefill, preemption (a pool too small for every sequence), window blocks
released as they slide out, and prefix-cache hits (the same prompts again, served from the cache)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_driver import hf_greedy
from v4_checkpoints import write_v4_checkpoint

NEW = 10


@pytest.fixture(scope="module")
def v4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_v4_checkpoint(tmp_path_factory.mktemp("v4_engine"), "mixed", seed=1)


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    shared = torch.randint(2, 96, (14,), generator=g).tolist()
    return [shared + torch.randint(2, 96, (n,), generator=g).tolist() for n in (3, 9)] + [
        torch.randint(2, 96, (n,), generator=g).tolist() for n in (5, 19)]


@pytest.mark.parametrize(("async_scheduling", "attention_backend"),
                         [(False, "reference"), (True, "reference"), (False, "batched"), (True, "batched")])
def test_llm_generate_equals_transformers_with_every_cache_feature(v4_dir: Path, async_scheduling: bool,
                                                                   attention_backend: str) -> None:
    """The reference attention (one call per sequence) and the batched decode rows alike."""
    from recipe.engine import LLM, SamplingParams
    from recipe.engine.block_manager import BlockManager
    from transformers import DeepseekV4ForCausalLM

    hf = DeepseekV4ForCausalLM.from_pretrained(v4_dir, dtype=torch.float32).eval()
    ps = prompts()
    want = [hf_greedy(hf, p, NEW) for p in ps]
    llm = LLM(str(v4_dir), block_size=4, num_kv_blocks=10, max_num_seqs=4, max_num_batched_tokens=8, num_threads=1,
              async_scheduling=async_scheduling, attention_backend=attention_backend)
    try:
        params = SamplingParams(temperature=0.0, max_tokens=NEW, ignore_eos=True)
        first = llm.generate(ps, params)
        again = llm.generate(ps, params)
        bm = llm.engine.block_manager
        assert isinstance(bm, BlockManager) and bm.per_kind_tables
        bm.check_invariants()
        preempted = sum(s.num_preemptions for s in llm.engine.scheduler.seen)
    finally:
        llm.shutdown()
    assert [list(o.new_token_ids) for o in first] == want
    assert [list(o.new_token_ids) for o in again] == want
    assert preempted > 0, "the pool was meant to be too small for every sequence at once"
    assert bm.released_blocks > 0, "no window block was released"
    assert bm.prefix_hits > 0, "the repeated prompts were not served from the prefix cache"


def test_window_release_off_keeps_every_block_and_the_same_tokens(v4_dir: Path) -> None:
    """The off switch: with `release_window_blocks=False` no block is released and the tokens are those of
    the default run (checked against transformers above)."""
    from recipe.engine import LLM, SamplingParams
    from transformers import DeepseekV4ForCausalLM

    hf = DeepseekV4ForCausalLM.from_pretrained(v4_dir, dtype=torch.float32).eval()
    ps = prompts()[2:]
    llm = LLM(str(v4_dir), block_size=4, num_kv_blocks=64, max_num_batched_tokens=8, num_threads=1,
              release_window_blocks=False)
    try:
        out = llm.generate(ps, SamplingParams(temperature=0.0, max_tokens=NEW, ignore_eos=True))
        released = llm.engine.block_manager.released_blocks
    finally:
        llm.shutdown()
    assert released == 0
    assert [list(o.new_token_ids) for o in out] == [hf_greedy(hf, p, NEW) for p in ps]


@pytest.fixture(autouse=True)
def record_sequences(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe.engine.scheduler import Scheduler

    original = Scheduler.add

    def add(self: Scheduler, seq: object) -> None:
        self.__dict__.setdefault("seen", []).append(seq)
        original(self, seq)  # type: ignore[arg-type]

    monkeypatch.setattr(Scheduler, "add", add)


def test_v4_defaults_to_the_batched_decode_rows_and_other_models_to_the_reference(v4_dir: Path,
                                                                                   tiny_llama_dir: Path) -> None:
    """`attention_backend=None` is the model's default: "batched" for V4 (proven equal above and against
    `transformers` in test_deepseek_v4_matches_transformers.py), "reference" elsewhere; a value given wins."""
    from recipe.engine import LLM

    for path, config, want in ((v4_dir, {}, "batched"), (tiny_llama_dir, {}, "reference"),
                               (v4_dir, {"attention_backend": "reference"}, "reference")):
        llm = LLM(str(path), num_kv_blocks=32, num_threads=1, **config)
        try:
            assert llm.engine.attention_backend == llm.engine.runner.attention_backend == want
        finally:
            llm.shutdown()
