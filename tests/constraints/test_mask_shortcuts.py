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


def _sibling(name: str):  # type: ignore[no-untyped-def]
    """A test module beside this one (its random schema generator)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(name + ".py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _walk_eos_switch(c, ids: list[int], rng: random.Random) -> int:
    """Walk `ids` with `Matcher.eos_from_mask` on and off side by side (random rollbacks, EOS accepted at the
    end); returns the number of steps where the masks were compared and EOS was allowed."""
    from recipe.constraints.backend import Matcher

    Matcher.eos_from_mask = False
    try:
        off = c.matcher()
    finally:
        Matcher.eos_from_mask = True
    on = c.matcher()
    assert off._eos_probe is None and on._eos_probe is not None
    a, b = c.allocate_bitmask(), c.allocate_bitmask()
    pos = accepting = 0
    to_start = True  # one rollback all the way to the start per walk
    while True:
        a[:] = -1
        on.fill_bitmask(a)
        off.fill_bitmask(b)
        assert np.array_equal(a, b), f"mask differs after {ids[:pos]}"
        accepting += bm.is_allowed(a, c.eos_token_ids[0])
        if pos == len(ids):
            break
        assert on.accept(ids[pos]) and off.accept(ids[pos])
        pos += 1
        if pos > 1 and rng.random() < 0.1:
            k = rng.randrange(1, min(pos, 6) + 1)
            if to_start and rng.random() < 0.2:
                k, to_start = pos, False
            on.rollback(k)
            off.rollback(k)
            pos -= k
    for e in c.eos_token_ids:  # every EOS id is allowed at the end, and after it only the EOS ids
        assert bm.is_allowed(a, e)
    assert on.accept(c.eos_token_ids[-1]) and off.accept(c.eos_token_ids[-1])
    on.fill_bitmask(a)
    off.fill_bitmask(b)
    assert np.array_equal(a, b)
    return accepting


def test_eos_read_from_the_mask_equals_asking_llguidance(tok) -> None:
    """`Matcher.eos_from_mask` (a clear EOS bit in llguidance's mask means "not accepting") gives the masks
    of the matcher that asks llguidance after every fill: random schemas and instances, rollbacks, numbers
    (accepting mid-lexeme), one and several EOS ids, termination."""
    strings = _sibling("test_string_masks")
    _gen, _serialise = strings._gen, strings._serialise
    rng = random.Random(31)
    accepting = walks = 0
    for n in range(60):
        schema, inst = _gen(rng, 0)
        if n % 3 == 0:
            schema, inst = {"type": "number"}, rng.choice([12, -3.5, 1e21, 0])  # accepting before the end
        eos = (1,) if n % 2 else (1, 2)  # a second EOS id outside llguidance's knowledge
        c = compile_constraint("json_schema", schema, tok, strict=False, cache=None, timeout_s=300,
                               eos_token_ids=eos)
        ids = tok.encode_plain(_serialise(rng, inst))
        m = c.matcher()
        if m.accept_many(ids) != len(ids) or not m.can_terminate():
            continue  # the generator's instance leaves the grammar
        accepting += _walk_eos_switch(c, ids, rng)
        walks += 1
    assert walks > 40 and accepting > walks  # compared at accepting states too, not only at the end
