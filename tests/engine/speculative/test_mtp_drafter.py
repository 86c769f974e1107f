"""Speculation with DeepSeek-V4's MTP layer (`speculative="mtp"`) on a tiny random V4 checkpoint given one random
MTP layer: greedy output equals the plain engine's, and every proposal equals the MTP layer's formula computed
directly (main forward over the whole sequence, then the MTP layer over every position in one call, then the
chain), so the MTP rows the drafter's catch-up wrote are the real ones."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from recipe.engine import LLM, SamplingParams
from recipe.engine.layers.v4_kv import V4Plan, V4Span
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from recipe.engine.sequence import Sequence
from recipe.engine.speculative import Draft

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from v4_checkpoints import add_mtp_layer, load_engine_v4, write_v4_checkpoint

VOCAB = 96
N = 2


@pytest.fixture(scope="module")
def mtp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = write_v4_checkpoint(tmp_path_factory.mktemp("v4_mtp_spec"), "mixed", seed=1)
    add_mtp_layer(path, seed=2)
    return path


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[Sequence]:
    """Every sequence the schedulers of this test were given (to count preemptions once they finished)."""
    from recipe.engine.scheduler import Scheduler

    added: list[Sequence] = []
    original = Scheduler.add

    def add(self: Scheduler, seq: Sequence) -> None:
        added.append(seq)
        original(self, seq)

    monkeypatch.setattr(Scheduler, "add", add)
    return added


def v4_llm(path: Path, **config: Any) -> LLM:
    config = {"block_size": 4, "num_kv_blocks": 64, "max_num_seqs": 4, "max_num_batched_tokens": 8,
              "num_threads": 1, **config}
    return LLM(str(path), **config)


def prompts() -> list[list[int]]:
    """Two prompts sharing 14 tokens (a prefix hit of 12 diverges inside a block), two others; past the window."""
    g = torch.Generator().manual_seed(11)
    shared = torch.randint(2, VOCAB, (14,), generator=g).tolist()
    return [shared + torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in (3, 9)] + [
        torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in (5, 19)]


class Recorder:
    """Wraps the MTP drafter: records each proposal with the sequence it was made for; with `oracle` (prompt ->
    the plain engine's greedy output) it then proposes that output instead, each token swapped with probability
    `corrupt`, so that drafts are accepted at every length and the catch-up covers accepted positions."""

    def __init__(self, inner: Any, oracle: dict[tuple[int, ...], list[int]] | None = None, corrupt: float = 0.3,
                 seed: int = 0) -> None:
        self.inner, self.oracle, self.corrupt, self.rng = inner, oracle, corrupt, random.Random(seed)
        self.seen: list[tuple[list[int], list[int], list[float]]] = []

    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        drafts = self.inner.propose(seqs, max_lens)
        for seq, d in zip(seqs, drafts, strict=True):
            if d.token_ids:
                self.seen.append((list(seq.token_ids), list(d.token_ids), list(d.raw)))
        if self.oracle is None:
            return drafts
        out = []
        for seq, n in zip(seqs, max_lens, strict=True):
            want = self.oracle[tuple(seq.token_ids[: seq.num_prompt_tokens])]
            done = len(seq.token_ids) - seq.num_prompt_tokens
            ids = [t if self.rng.random() >= self.corrupt else (t + 1) % VOCAB for t in want[done : done + n]]
            out.append(Draft(ids, [0.9] * len(ids)))
        return out

    def after_step(self, step: Any, result: Any) -> None:
        self.inner.after_step(step, result)  # the catch-up writes the MTP rows every later proposal reads

    def observe(self, draft: Draft, num_accepted: int) -> None:
        pass


def reference_proposal(model: DeepseekV4ForCausalLM, tokens: list[int], k: int,
                       next_at: dict[int, int] | None = None) -> tuple[list[int], list[float]]:
    """The MTP chain for a sequence whose last token has no KV yet, from scratch: the main model over positions
    0..p in one call, the MTP layer over 0..p (next tokens 1..p+1, or `next_at[position]`) in one call, then
    k - 1 chained calls."""
    model.allocate_kv_cache(64, 4, torch.float32, "cpu")
    tables = {s.name: torch.arange(64) for s in model.cache_specs()}
    p = len(tokens) - 2
    with torch.inference_mode():
        plan = V4Plan((V4Span(0, p + 1, 0, tables),), 4)
        model(torch.tensor(tokens[: p + 1]), torch.arange(p + 1), plan)
        assert model.last_streams is not None
        follow = [(next_at or {}).get(i, t) for i, t in enumerate(tokens[1:])]
        logits, out = model.mtp_forward(model.last_streams, torch.tensor(follow), torch.arange(p + 1), plan)
        prob, tok = torch.softmax(logits[p], dim=-1).max(dim=-1)
        ids, probs, h = [int(tok)], [float(prob)], out[p : p + 1]
        for j in range(1, k):
            logits, h = model.mtp_forward(h, torch.tensor(ids[-1:]), torch.tensor([p + j]),
                                          V4Plan((V4Span(0, 1, p + j, tables),), 4))
            prob, tok = torch.softmax(logits[0], dim=-1).max(dim=-1)
            ids.append(int(tok))
            probs.append(float(prob))
    return ids, probs


def greedy(llm: LLM, ps: list[list[int]], n: int = 1, **params: Any) -> list[list[int]]:
    out = llm.generate(ps, SamplingParams(temperature=0.0, max_tokens=14, ignore_eos=True, n=n, **params))
    return [list(o.new_token_ids) for o in out]


def greedy_without_speculation(path: Path, ps: list[list[int]]) -> list[list[int]]:
    off = v4_llm(path, num_kv_blocks=10)
    try:
        return greedy(off, ps, n=N)
    finally:
        off.shutdown()


def run_twice(llm: LLM, ps: list[list[int]], prepare: Callable[[LLM], None] | None = None
              ) -> tuple[list[list[int]], list[list[int]], Any, int]:
    """Greedy outputs of `llm` (after `prepare`) twice, the second time every prompt a prefix hit; then its
    speculative metrics and prefix hits, the block manager's invariants checked; `llm` is shut down."""
    try:
        if prepare is not None:
            prepare(llm)
        first = greedy(llm, ps, n=N)
        again = greedy(llm, ps, n=N)
        bm = llm.engine.block_manager
        bm.check_invariants()
        return first, again, llm.engine.stats().speculative, bm.prefix_hits
    finally:
        llm.shutdown()


@pytest.mark.parametrize(("oracle", "backend"), [(False, "batched"), (True, "batched"), (True, "reference")])
def test_every_proposal_equals_the_mtp_formula_computed_directly(mtp_dir: Path, oracle: bool, backend: str,
                                                                 seen: list[Sequence]) -> None:
    """Batching, chunked prefill, preemption (a pool too small for all), prefix hits (each prompt twice) and
    n = 2: every proposal's tokens equal the reference's and its probabilities are close. With the oracle the
    drafts verified are mostly right, so the catch-up runs over accepted positions of every length. Both
    attention backends (the batched decode rows, and the per-sequence reference) for catch-up and chain."""
    ps = prompts()
    expected = greedy_without_speculation(mtp_dir, ps)
    seen.clear()
    recorders: list[Recorder] = []

    def record(llm: LLM) -> None:
        assert llm.engine.runner.attention_backend == backend
        recorders.append(Recorder(llm.engine.speculator.drafter,
                                  {tuple(p): e for p, e in zip(ps, expected[::2], strict=True)} if oracle else None))
        llm.engine.speculator.drafter = recorders[0]

    first, again, m, hits = run_twice(v4_llm(mtp_dir, num_kv_blocks=10, speculative="mtp", num_speculative_tokens=3,
                                             attention_backend=backend), ps, record)
    rec = recorders[0]
    preempted = sum(s.num_preemptions for s in seen)
    assert first == expected and again == expected
    assert hits > 0 and preempted > 0
    assert len(rec.seen) > 30
    if oracle:
        assert 0 < m.accepted_tokens < m.draft_tokens
        assert m.mean_accepted_length > 1.5
    model = load_engine_v4(mtp_dir)
    for tokens, ids, raw in rec.seen:
        want, probs = reference_proposal(model, tokens, len(ids))
        assert ids == want, (tokens, ids, want)
        assert raw == pytest.approx(probs, abs=1e-4)


def test_a_prefix_hit_restores_the_mtp_rows_of_the_cached_blocks(mtp_dir: Path) -> None:
    """B hits the 12 tokens it shares with A (3 blocks) and gets A's MTP rows with them. Row 11 encodes the token
    at 12, A's: where B's differs, B's first proposal is the formula's with A's token at 12 (one stale row, as
    documented), not the exact one; the output is the plain engine's all the same."""
    g = torch.Generator().manual_seed(5)
    shared = torch.randint(2, VOCAB, (12,), generator=g).tolist()
    a = [*shared, 40, *torch.randint(2, VOCAB, (5,), generator=g).tolist()]
    b = [*shared, 41, *torch.randint(2, VOCAB, (5,), generator=g).tolist()]
    off = v4_llm(mtp_dir)
    expected = [greedy(off, [a]), greedy(off, [b])]
    off.shutdown()
    llm = v4_llm(mtp_dir, speculative="mtp", num_speculative_tokens=2)
    try:
        rec = Recorder(llm.engine.speculator.drafter)
        llm.engine.speculator.drafter = rec
        got = [greedy(llm, [a])]
        before = len(rec.seen)
        got.append(greedy(llm, [b]))
        hits = llm.engine.block_manager.prefix_hits
    finally:
        llm.shutdown()
    assert got == expected
    assert hits == 12
    tokens, ids, raw = rec.seen[before]
    assert tokens == b + expected[1][0][:1]
    model = load_engine_v4(mtp_dir)
    stale_ids, stale = reference_proposal(model, tokens, len(ids), next_at={11: 40})
    assert ids == stale_ids and raw == pytest.approx(stale, abs=1e-4)
    _, exact = reference_proposal(model, tokens, len(ids))
    assert max(abs(x - y) for x, y in zip(raw, exact, strict=True)) > 1e-3


@pytest.mark.parametrize("k", [1, 3, "auto"])
def test_greedy_output_is_identical_with_mtp_speculation_on_and_off(mtp_dir: Path, k: int | str,
                                                                    seen: list[Sequence]) -> None:
    """The MTP layer's own drafts (random weights: mostly rejected) under batching, chunked prefill, n = 2,
    preemption and prefix hits (the prompts twice); "auto" profiles the V4 step cost at start-up."""
    ps = prompts()
    expected = greedy_without_speculation(mtp_dir, ps)
    seen.clear()
    first, again, m, hits = run_twice(v4_llm(mtp_dir, num_kv_blocks=10, speculative="mtp", num_speculative_tokens=k), ps)
    assert first == expected and again == expected
    assert hits > 0 and sum(s.num_preemptions for s in seen) > 0
    if k == "auto":  # random MTP weights: drafts rarely pay for their verification; "auto" chose per step
        assert sum(m.length_histogram.values()) > 20 and m.zero_length > 0
    else:  # counted in SpecMetrics (acceptance ~0: random weights)
        assert m.draft_tokens > 0 and m.drafts > 0 and m.mean_accepted_length >= 1.0


def test_stop_tokens_and_constraints_with_mtp_speculation(mtp_dir: Path) -> None:
    """A stop token that the output reaches ends it at the same place; a constraint (tokens below 60 of
    alternating parity) gives the same constrained output, every token allowed."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_constraints import Parity, allowed_at

    ps = prompts()
    off = v4_llm(mtp_dir)
    stop = greedy(off, ps[:1])[0][6]
    kw: list[dict[str, Any]] = [{"stop_token_ids": (stop,)}, {"constraint": Parity(20)}, {"constraint": Parity(20)}]
    expected = [off.generate(ps, SamplingParams(temperature=0.0, max_tokens=14, **kw[0])),
                off.generate(ps, [SamplingParams(temperature=0.0, max_tokens=14, **kw[1]) for _ in ps])]
    off.shutdown()
    llm = v4_llm(mtp_dir, speculative="mtp", num_speculative_tokens=2)
    try:
        got = [llm.generate(ps, SamplingParams(temperature=0.0, max_tokens=14, **kw[0])),
               llm.generate(ps, [SamplingParams(temperature=0.0, max_tokens=14, **kw[2]) for _ in ps])]
        m = llm.engine.stats().speculative
    finally:
        llm.shutdown()
    for want, have in zip(expected, got, strict=True):
        assert [o.new_token_ids for o in have] == [o.new_token_ids for o in want]
        assert [o.finish_reason for o in have] == [o.finish_reason for o in want]
    assert got[0][0].finish_reason == "stop" and got[0][0].stop_token_id == stop
    assert all(t in allowed_at(i, 20) for o in got[1] for i, t in enumerate(o.new_token_ids))
    assert m.draft_tokens > 0


def test_mtp_on_a_checkpoint_without_mtp_layers_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """At load (`LLM`), and as `recipe serve`'s start-up error (exit status 2, one line, no traceback)."""
    import uvicorn

    from recipe.cli import main

    monkeypatch.setattr(uvicorn.Server, "run", lambda *_a, **_k: pytest.fail("the server started"))

    path = write_v4_checkpoint(tmp_path, "mixed")
    with pytest.raises(ValueError, match="speculative='mtp' needs a checkpoint with multi-token-prediction"):
        v4_llm(path, speculative="mtp")
    from spec_helpers import make_llm
    from tiny_paged_model import TinyPagedLM

    with pytest.raises(ValueError, match="this TinyPagedLM has none"):  # a model with no MTP at all
        make_llm(TinyPagedLM(seed=1), speculative="mtp", num_speculative_tokens=2)
    rc = main(["serve", "--model", str(path), "--speculative", "mtp", "--num-speculative-tokens", "2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "recipe serve: speculative='mtp' needs a checkpoint with multi-token-prediction layers" in err
    assert "Traceback" not in err


def test_session_cache_hits_restore_the_mtp_rows(mtp_dir: Path) -> None:
    """With the sliding-window session cache, a conversation's next turn gets its window back from the cache
    (MTP columns included): output equal to the plain engine's, every proposal the formula's."""
    base: dict[str, Any] = {"num_kv_blocks": 96, "max_num_batched_tokens": 24, "swa_session_bytes": 1 << 20,
                            "swa_session_grain": 16}

    def conversation(llm: LLM) -> list[list[int]]:
        g = torch.Generator().manual_seed(5)
        history: dict[int, list[int]] = {0: [], 1: []}
        outs = []
        for _ in range(3):
            for s in (0, 1):
                prompt = history[s] + torch.randint(2, VOCAB, (int(torch.randint(20, 40, (1,), generator=g)),),
                                                    generator=g).tolist()
                outs += greedy(llm, [prompt])
                history[s] = prompt + outs[-1]
        return outs

    off = v4_llm(mtp_dir, **base)
    expected = conversation(off)
    off.shutdown()
    llm = v4_llm(mtp_dir, speculative="mtp", num_speculative_tokens=3, **base)
    try:
        rec = Recorder(llm.engine.speculator.drafter)
        llm.engine.speculator.drafter = rec
        got = conversation(llm)
        llm.engine.block_manager.check_invariants()
        sessions = llm.engine.stats().swa_sessions
    finally:
        llm.shutdown()
    assert got == expected
    assert sessions is not None and sessions.hits > 0
    model = load_engine_v4(mtp_dir, num_blocks=96)
    for tokens, ids, raw in rec.seen:
        want, probs = reference_proposal(model, tokens, len(ids))
        assert ids == want and raw == pytest.approx(probs, abs=1e-4)
