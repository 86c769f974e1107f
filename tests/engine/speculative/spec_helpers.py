"""Helpers for the speculative decoding tests: a tiny-model engine and a drafter that knows the answer."""

from __future__ import annotations

import json
import random
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from recipe.engine import LLM
from recipe.engine.sequence import Sequence
from recipe.engine.speculative import Draft
from tiny_paged_model import VOCAB, TinyInfo, TinyPagedLM


def make_llm(model: TinyPagedLM, **config: object) -> LLM:
    config = {"dtype": "float64", "num_kv_blocks": 256, "block_size": 4, "max_num_batched_tokens": 48,
              "num_threads": 1, **config}
    if "speculative_cost_model" in config:  # a given cost stays as given: the tiny model's own steps (~ms) would
        config.setdefault("speculative_cost_cells", False)  # teach it their shape (cost_model.py, `learn_cells`)
    return LLM((model, TinyInfo()), **config)


@cache
def fixed_cost_model(token_share: float = 0.0) -> str:
    """A step-cost file (`speculative_cost_model`): a step costs 1 s plus `token_share` s per token, so each verified
    position costs that share of a step, whatever the machine's load (a profile taken under heavy load can make
    "auto" draft nothing, or never pause, and a test that needs either would then prove nothing). 1 s dwarfs any
    drafter's time, so only the share and the drafter's confidences decide."""
    path = Path(tempfile.mkdtemp(prefix="recipe-cost-")) / f"cost_{token_share}.json"
    path.write_text(json.dumps({"intercept": 1.0, "per_seq": 0.0, "per_token": token_share}))
    return str(path)


def flat_cost_model() -> str:
    """`fixed_cost_model(0.0)`: verifying more positions costs nothing, so "auto" drafts wherever it is confident."""
    return fixed_cost_model(0.0)


class OracleDrafter:
    """Proposes the target's own greedy continuation, each token replaced by a random one with probability
    `corrupt`: long accepted runs, rejections at every position, drafts across block boundaries."""

    def __init__(self, model: TinyPagedLM, corrupt: float, seed: int = 0) -> None:
        self.model, self.corrupt, self.rng = model, corrupt, random.Random(seed)
        self.observed: list[tuple[list[int], int]] = []

    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        out = []
        for seq, n in zip(seqs, max_lens, strict=True):
            ids, draft = list(seq.token_ids), []
            for _ in range(max(n, 0)):
                tok = int(self.model.full_logits(ids)[-1].argmax())
                if self.rng.random() < self.corrupt:
                    tok = self.rng.randrange(VOCAB)
                draft.append(tok)
                ids.append(tok)
            out.append(Draft(draft, [0.9] * len(draft)))
        return out

    def after_step(self, step: Any, result: Any) -> None:
        pass  # reads only the sequences' tokens

    def observe(self, draft: Draft, num_accepted: int) -> None:
        self.observed.append((draft.token_ids, num_accepted))


def use_drafter(llm: LLM, drafter: object) -> None:
    """Swap in a test drafter; its time is not counted as drafting cost ("auto" would rightly refuse an
    oracle that runs the whole model in Python per token)."""
    llm.engine.speculator.drafter = drafter
    llm.engine.speculator.count_drafter_time = False


def cached_blocks_match_sequences(llm: LLM, sequences: list[list[int]]) -> None:
    """Every block registered in the prefix cache holds a block-aligned chunk of some real sequence."""
    bm = llm.engine.block_manager
    bs = bm.block_size
    chunks = {tuple(s[i * bs:(i + 1) * bs]) for s in sequences for i in range(len(s) // bs)}
    registered = [bm.token_ids[b] for b in range(bm.num_blocks) if bm.pool.hash_of[b] is not None]
    assert registered
    for token_ids in registered:
        assert token_ids in chunks, token_ids


def cached_kv_equals_recomputed(llm: LLM, model: TinyPagedLM, sequences: list[list[int]], seed: int) -> int:
    """Every registered block that a fresh engine (no speculation) also registers for the same tokens
    holds the same K/V: no draft's KV hides under a real token. Returns how many blocks were compared."""
    import torch

    ref_model = TinyPagedLM(seed=seed)
    ref = make_llm(ref_model)
    from recipe.engine import SamplingParams

    ref.generate(sequences, SamplingParams(temperature=0.0, max_tokens=1))
    bm, ref_bm = llm.engine.block_manager, ref.engine.block_manager
    compared = 0
    for h, block in bm.cached.items():
        ref_block = ref_bm.cached.get(h)
        if ref_block is None:
            continue
        for (k, v), (rk, rv) in zip(model.caches, ref_model.caches, strict=True):
            assert torch.allclose(k[block], rk[ref_block], atol=1e-9), f"block {block} holds other KV"
            assert torch.allclose(v[block], rv[ref_block], atol=1e-9), f"block {block} holds other KV"
        compared += 1
    ref.shutdown()
    return compared
