"""Mask reuse inside free JSON strings (`string_masks`) gives the masks of the same matcher with reuse off.

A property test over random schemas and instances (free strings with escapes, multi-byte and split
characters, formats, enums, nested objects and arrays, additional properties, combinators), with random
rollbacks and the batched path; plus the places the tracker must not mark.
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import numpy as np

from recipe.constraints import compile_constraint
from recipe.constraints.string_masks import StringTracker

ALPHABET = ["a", "b", "Z", " ", "  ", ".", ",", ":", "{", "}", "[", "]", '"', "\\", "\n", "\t", "/", "é", "数据", "😀",
            "\x01", "the", " quick", " brown", "fox", "0", "42", "-", "'", "<", "&", "\u2028"]


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def _gen(rng: random.Random, depth: int) -> tuple[Any, Any]:
    """A (schema, valid instance) pair."""
    roll = rng.random()
    if depth >= 3 or roll < 0.35:
        choice = rng.randrange(9)
        if choice <= 2:
            schema: Any = {"type": "string"}
            if rng.random() < 0.3:
                schema["description"] = "free text"
            return schema, _text(rng, rng.randrange(0, 40))
        if choice == 3:
            return {"type": "string", "format": "date"}, f"2025-0{rng.randrange(1, 10)}-1{rng.randrange(10)}"
        if choice == 4:
            return {"enum": ["red", "green", "a b"]}, rng.choice(["red", "green", "a b"])
        if choice == 5:
            return {"type": "integer"}, rng.randrange(-1000, 1000)
        if choice == 6:  # length bounds: the reuse band lies between minLength and maxLength - longest token
            lo, hi = rng.choice([0, 3, 10]), rng.choice([30, 140, 150, 200])
            text = _text(rng, rng.randrange(0, 80))[: rng.randrange(lo, hi + 1)]
            return {"type": "string", "minLength": lo, "maxLength": hi}, text + "a" * max(0, lo - len(text))
        if choice == 7:
            return {"anyOf": [{"type": "string"}, {"type": "integer"}]}, rng.choice([_text(rng, 12), 7])
        return {}, rng.choice([_text(rng, 15), 3.5, None, True, {"k": _text(rng, 5)}, [_text(rng, 4)]])
    if roll < 0.7:
        props: dict[str, Any] = {}
        inst: dict[str, Any] = {}
        for i in range(rng.randrange(1, 5)):
            name = rng.choice(["name", "n\u00e9", "note", "x", "key with space", 'q"uote']) + str(i)
            s, v = _gen(rng, depth + 1)
            props[name] = s
            if rng.random() < 0.8:
                inst[name] = v
        schema = {"type": "object", "properties": props, "required": [k for k in props if k in inst]}
        extra = rng.choice(["absent", "true", "false", "string"])
        if extra == "true":
            schema["additionalProperties"] = True
        elif extra == "false":
            schema["additionalProperties"] = False
        elif extra == "string":
            schema["additionalProperties"] = {"type": "string"}
        if extra in ("absent", "true", "string") and rng.random() < 0.5:
            inst["zz_extra"] = _text(rng, rng.randrange(1, 20))
        return schema, inst
    s, v = _gen(rng, depth + 1)
    n = rng.randrange(0, 4)
    items = [v]
    for _ in range(n):
        items.append(_gen(random.Random(rng.random()), 3)[1] if False else v)
    schema = {"type": "array", "items": s}
    if rng.random() < 0.5:
        schema["maxItems"] = len(items) + rng.randrange(0, 3)
    return schema, items


def _serialise(rng: random.Random, value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=rng.random() < 0.25)


def _tracked(c: Any) -> Any:
    """`c` with the tracker on whatever its schema (the compiler turns it on only where it pays)."""
    return dataclasses.replace(c, extra={**c.extra, "track_strings": True})


def _walk_pair(c: Any, ids: list[int], rng: random.Random) -> tuple[int, int, bool]:
    """Walk `ids` with reuse on and off side by side, rolling back at random; returns (steps compared,
    steps the tracker marked for reuse, whether the walk reached the end)."""
    on, off = c.matcher(), c.matcher(reuse_string_masks=False)
    a, b = c.allocate_bitmask(), c.allocate_bitmask()
    tracker = on.backend_matcher._strings
    assert tracker is not None and off.backend_matcher._strings is None
    pos = steps = marked = 0
    while pos < len(ids):
        on.fill_bitmask(a)
        off.fill_bitmask(b)
        assert np.array_equal(a, b), f"mask differs at step {pos} of {ids}"
        steps += 1
        marked += tracker.key is not None
        t = ids[pos]
        if not (int(b[t >> 5]) >> (t & 31)) & 1:
            return steps, marked, False  # the instance leaves the grammar (generator vs llguidance): stop comparing here
        assert on.accept(t) and off.accept(t)
        pos += 1
        if pos > 2 and rng.random() < 0.08:
            k = rng.randrange(1, min(pos, 6) + 1)
            on.rollback(k)
            off.rollback(k)
            pos -= k
    on.fill_bitmask(a)
    off.fill_bitmask(b)
    assert np.array_equal(a, b)
    return steps, marked, True


def test_reused_masks_equal_masks_computed_afresh_on_random_schemas(tok) -> None:
    rng = random.Random(2222)
    total = marked = completed = 0
    for _ in range(120):
        schema, inst = _gen(rng, 0)
        c = _tracked(compile_constraint("json_schema", schema, tok, strict=False, cache=None, timeout_s=300))
        ids = tok.encode_plain(_serialise(rng, inst))
        s, m, done = _walk_pair(c, ids, rng)
        total += s
        marked += m
        completed += done
    assert completed > 90 and total > 2500
    assert marked > 200  # reuse happened: the comparison above covered it


def test_any_value_schema_and_long_free_text(tok) -> None:
    rng = random.Random(5)
    c = _tracked(compile_constraint("json_schema", {"type": "object"}, tok, strict=False, timeout_s=300))
    text = "".join(rng.choice([a for a in ALPHABET if a != "\x01"]) for _ in range(600))
    ids = tok.encode_plain(json.dumps({"a": text, "b": [text[:50], {"c": text[::-1]}]}, ensure_ascii=False))
    _, marked, done = _walk_pair(c, ids, rng)
    assert done
    assert marked > len(ids) // 2


def test_batched_fill_keeps_reuse_exact(tok, batched_masks_equal) -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"},
                                               "when": {"type": "string", "format": "date"}}}
    c = _tracked(compile_constraint("json_schema", schema, tok, strict=False, timeout_s=300))
    docs = [{"title": "A long title with words", "body": "line one\nline \"two\" 数据 " * 6, "when": "2025-01-02"},
            {"title": "x", "body": "é" * 40, "when": "2024-12-31"}]
    id_lists = [tok.encode_plain(json.dumps(d, separators=(",", ":"), ensure_ascii=False)) for d in docs]
    batched_masks_equal([c.matcher() for _ in docs], [c.matcher(reuse_string_masks=False) for _ in docs], id_lists,
                        c.allocate_bitmask().shape[0])


def test_tracker_marks_only_free_strings(tok) -> None:
    from recipe.constraints.vocabulary import vocabulary_of

    vocab = vocabulary_of(tok)
    schema = {"type": "object", "properties": {
        "free": {"type": "string", "title": "t"}, "date": {"type": "string", "format": "date"},
        "either": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "short": {"type": "string", "maxLength": 9},
        "list": {"type": "array", "items": {"type": "string"}}, "tuple": {"prefixItems": [{"type": "string"}]}}}

    def marked_inside(text: str, field: str) -> bool:
        t = StringTracker(schema, vocab)
        for i in tok.encode_plain(text):
            t.advance(i)
        return t.key is not None

    assert marked_inside('{"free":"some words', "free")
    assert marked_inside('{"free":"a\\nb', "free")
    assert not marked_inside('{"free":"a\\u00e9b', "free")  # \u escapes end reuse for this string
    assert not marked_inside('{"free":"done","', "free")  # a key
    assert not marked_inside('{"date":"2025-', "date")
    assert not marked_inside('{"either":"x', "either")
    assert not marked_inside('{"short":"x', "short")
    assert marked_inside('{"list":["a","b', "list")
    assert not marked_inside('{"tuple":["a', "tuple")
    assert marked_inside('{"other":"free by additionalProperties', "other")
    bounded = {"type": "string", "minLength": 3, "maxLength": 140}
    long_schema = {"type": "array", "items": bounded}

    def marked_at(text: str) -> bool:
        t = StringTracker(long_schema, vocab)
        for i in tok.encode_plain(text):
            t.advance(i)
        return t.key is not None

    assert not marked_at('["a')  # fewer than minLength characters
    assert marked_at('["abcd')
    assert marked_at('["数据数据')  # characters, not bytes, count towards minLength
    assert not marked_at('["' + "x" * 13)  # 13 + 128 (longest token) > 140


def test_length_bounded_string_up_to_its_maximum(tok) -> None:
    """The reuse band of a bounded string ends before maxLength; walking to exactly maxLength stays exact."""
    rng = random.Random(11)
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 5, "maxLength": 300}},
              "required": ["s"]}
    c = compile_constraint("json_schema", schema, tok, strict=True, timeout_s=300)
    for length in (300, 299, 180, 6):
        text = "".join(rng.choice(["a", " the", "é", "数据", "\n", '"', "long words here"]) for _ in range(400))
        text = text[:length]
        ids = tok.encode_plain(json.dumps({"s": text}, ensure_ascii=False))
        _, marked, done = _walk_pair(c, ids, rng)
        assert done
        assert marked > 0 or length < 10


def test_tracker_only_where_a_bounded_string_leaves_a_band(tok) -> None:
    free = compile_constraint("json_schema", {"type": "object", "properties": {"a": {"type": "string"}}}, tok,
                              timeout_s=300)
    short = compile_constraint("json_schema", {"type": "string", "minLength": 10, "maxLength": 130}, tok,
                               timeout_s=300)
    long = compile_constraint("json_schema", {"type": "array", "items": {"type": "string", "maxLength": 2000}},
                              tok, timeout_s=300)
    assert not free.extra["track_strings"] and free.matcher().backend_matcher._strings is None
    assert not short.extra["track_strings"]
    assert long.extra["track_strings"] and long.matcher().backend_matcher._strings is not None
    assert long.matcher(reuse_string_masks=False).backend_matcher._strings is None
