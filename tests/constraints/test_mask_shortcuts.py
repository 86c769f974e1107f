"""The matcher's fill shortcuts (start-state mask copy, kept output array) equal llguidance computed afresh."""

from __future__ import annotations

import random

import llguidance as llg
import numpy as np

from recipe.constraints import bitmask as bm
from recipe.constraints import compile_constraint
from recipe.constraints.batch import fill_bitmasks
from recipe.constraints.instance_check import serialise
from recipe.constraints.llguidance_backend import ll_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"enum": ["a", "bc"]}}},
    "required": ["name"],
}


def _fresh_mask(c, ids: list[int]) -> np.ndarray:
    """llguidance from scratch (a new matcher on the grammar text, a new array), EOS fixed as the contract says."""
    m = llg.LLMatcher(ll_tokenizer(c.vocabulary), c.handle.grammar, log_level=0)
    for t in ids:
        assert m.consume_token(t)
    out = c.allocate_bitmask()
    m.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)
    bm.set_allowed(out, c.eos_token_ids, bool(m.is_accepting()))
    return out


def test_fills_equal_fresh_llguidance_across_arrays_and_rollbacks(tok) -> None:
    c = compile_constraint("json_schema", SCHEMA, tok, strict=False, timeout_s=300)
    ids = tok.encode_plain(serialise({"name": "Ada \u00e9", "tags": ["bc", "a"]}))
    rng = random.Random(7)
    arrays = [c.allocate_bitmask(), c.allocate_bitmask(), np.zeros(c.allocate_bitmask().shape[0] + 3, np.int32)]
    m = c.matcher()
    pos = 0
    for _ in range(4 * len(ids)):
        out = rng.choice(arrays)  # the same array again (kept pointer), or another one
        out[:] = -1
        m.fill_bitmask(out)
        words = bm.words_for(c.vocab_size)
        assert np.array_equal(out[:words], _fresh_mask(c, ids[:pos]))
        assert not out[words:].any()
        if pos and rng.random() < 0.3:
            back = rng.randint(1, pos)  # sometimes all the way back to the start state
            m.rollback(back)
            pos -= back
        elif pos < len(ids):
            assert m.accept(ids[pos])
            pos += 1


def test_batch_fill_equals_single_fills_at_start_and_later(tok) -> None:
    c = compile_constraint("json_schema", SCHEMA, tok, strict=False, timeout_s=300)
    ids = tok.encode_plain(serialise({"name": "x"}))
    started, fresh = c.matcher(), c.matcher()
    assert started.accept(ids[0]) and started.accept(ids[1])
    batch = c.allocate_bitmask(3)
    fill_bitmasks([fresh, started, None], batch)
    assert np.array_equal(batch[0], _fresh_mask(c, []))
    assert np.array_equal(batch[1], _fresh_mask(c, ids[:2]))
    assert (batch[2] == -1).all()
