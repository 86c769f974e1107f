"""Soundness by construction, on every compiled schema of the JSON-Schema-Test-Suite.

Random walks sample only ids the mask allows: every one must be accepted by the backend (mask ⊆ acceptor),
a fresh matcher must accept the same prefix (replay), rollback must restore the same mask, and each
finished document must validate with `jsonschema` whenever the report says the schema is enforced exactly.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from recipe.constraints import ConstraintError, compile_constraint
from recipe.constraints import bitmask as bm
from recipe.constraints.suite import load_suite

STRUCTURAL = list('{}[]",:0123456789-.etruflsan ')


def structural_ids(tok) -> np.ndarray:
    ids = [tok.encode_plain(c) for c in STRUCTURAL]
    return np.array(sorted({i[0] for i in ids if len(i) == 1}))


def random_walk(c, rng, struct: np.ndarray, max_steps: int) -> tuple[list[int], bool]:
    """Sample allowed ids (half the time a structural one, EOS when allowed with p=0.5)."""
    m = c.matcher()
    mask = c.allocate_bitmask()
    ids: list[int] = []
    for _ in range(max_steps):
        m.fill_bitmask(mask)
        allowed = bm.to_bool(mask, c.vocab_size)
        if allowed[1] and rng.random() < 0.5:
            assert m.accept(1)
            return ids, True
        pool = struct[allowed[struct]] if rng.random() < 0.5 else np.array([], dtype=np.int64)
        if pool.size == 0:
            pool = np.flatnonzero(allowed)
        if pool.size == 0:
            return ids, False
        t = int(rng.choice(pool))
        assert m.accept(t), "mask allowed an id the matcher refused"
        if m.is_terminated():
            return ids, True
        ids.append(t)
    return ids, False


def test_random_walks_on_every_suite_schema_are_sound(tok, suite_dir, remotes) -> None:
    registry = Registry().with_resources(
        (u, Resource.from_contents(d, default_specification=DRAFT202012)) for u, d in remotes.items()
    )
    rng = np.random.default_rng(1234)
    struct = structural_ids(tok)
    compiled = finished = validated_exact = 0
    for groups in load_suite(suite_dir).values():
        for g in groups:
            try:
                c = compile_constraint("json_schema", g["schema"], tok, strict=False, resources=remotes, cache=None)
            except ConstraintError:
                continue
            compiled += 1
            for _ in range(2):
                ids, done = random_walk(c, rng, struct, 48)
                replay = c.matcher()
                assert replay.accept_many(ids) == len(ids)
                if ids:
                    before = c.allocate_bitmask()
                    after = c.allocate_bitmask()
                    k = min(len(ids), 3)
                    replay.rollback(k)
                    replay.fill_bitmask(before)
                    assert replay.accept_many(ids[-k:]) == k
                    replay.rollback(k)
                    replay.fill_bitmask(after)
                    assert np.array_equal(before, after)
                if done:
                    finished += 1
                    text = tok.decode(ids)
                    if c.report is not None and c.report.enforced_exactly:
                        v = jsonschema.Draft202012Validator(g["schema"], registry=registry)
                        assert v.is_valid(json.loads(text)), (g["description"], text)
                        validated_exact += 1
    print(f"compiled {compiled}, finished walks {finished}, validated (exact) {validated_exact}")
    assert compiled > 340
    assert finished > 200 and validated_exact > 150
