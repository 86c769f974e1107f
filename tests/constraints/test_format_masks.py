"""Composed masks inside format and pattern strings (`format_masks`) equal llguidance's own masks.

A random walk over random schemas with every supported format and a few anchored patterns, random valid
values (and schema positions that change what may follow a string), random token choices inside the
strings (any id the mask allows, not only the instance's), rollbacks and the batched path, compares every
mask with the same matcher with the reuse off. Then the DFA itself is held to llguidance: at the states
the walks visit, the ids the DFA keeps alive are exactly llguidance's inner mask over the whole vocabulary.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

import numpy as np
import pytest

from recipe.constraints import compile_constraint
from recipe.constraints.format_dfa import Unsupported, pattern_dfa, string_dfa
from recipe.constraints.format_masks import format_tables, quote_tokens
from recipe.constraints.string_formats import FORMAT_REGEX
from recipe.constraints.vocabulary import vocabulary_of

HEXD = "0123456789abcdefABCDEF"


def _value(rng: random.Random, fmt: str) -> str:
    """A random valid value of `fmt`."""
    d = lambda n: "".join(rng.choice(string.digits) for _ in range(n))  # noqa: E731
    h = lambda n: "".join(rng.choice(HEXD) for _ in range(n))  # noqa: E731
    word = lambda: "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(rng.randrange(1, 9)))  # noqa: E731
    date = f"{d(4)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    time = f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}" + rng.choice(
        ["", "." + d(rng.randrange(1, 4))]) + rng.choice(["Z", "z", f"+{rng.randrange(24):02d}:{rng.randrange(6)}0", "-05:30"])
    octet = lambda: str(rng.randrange(256))  # noqa: E731
    if fmt == "date":
        return date
    if fmt == "time":
        return time
    if fmt == "date-time":
        return date + rng.choice("Tt") + time
    if fmt == "duration":
        return rng.choice([f"P{d(1)}Y{d(2)}M", f"PT{d(2)}H{d(1)}S", f"P{d(1)}W", f"P{d(2)}DT{d(1)}M", "P1Y2M3DT4H5M6S"])
    if fmt == "email":
        local = ".".join(word() for _ in range(rng.randrange(1, 3))) + rng.choice(["", "+tag", "_x"])
        host = rng.choice([".".join(word() for _ in range(rng.randrange(1, 4))), f"[{octet()}.{octet()}.{octet()}.{octet()}]"])
        return f"{local}@{host}"
    if fmt == "hostname":
        return ".".join(word() for _ in range(rng.randrange(1, 4)))
    if fmt == "ipv4":
        return ".".join(octet() for _ in range(4))
    if fmt == "ipv6":
        return rng.choice([":".join(h(rng.randrange(1, 5)) for _ in range(8)), f"{h(4)}::{h(2)}", "::1", f"fe80::{h(4)}:{h(3)}"])
    if fmt == "uuid":
        return f"{h(8)}-{h(4)}-{h(4)}-{h(4)}-{h(12)}"
    if fmt == "uri":
        scheme = rng.choice(["https", "http", "ftp", "urn", "mailto", "git+ssh"])
        path = "".join("/" + word() for _ in range(rng.randrange(0, 4)))
        tail = rng.choice(["", "?q=" + word(), "#" + word(), "?a=1&b=%20x#top"])
        host = rng.choice([f"{word()}.com", f"{octet()}.{octet()}.{octet()}.{octet()}", f"[{h(4)}::{h(2)}]",
                           f"user:pw@{word()}.org:8080"])
        return rng.choice([f"{scheme}://{host}{path}{tail}", f"{scheme}:{word()}{path}", f"{scheme}:/{word()}"])
    raise AssertionError(fmt)


PATTERNS = [("^[A-Z]{2}[0-9]{3}$", lambda rng: "".join(rng.choice("ABCXYZ") for _ in range(2)) + str(rng.randrange(100, 1000))),
            ("^ord_[a-z0-9]{8}$", lambda rng: "ord_" + "".join(rng.choice("abc0123") for _ in range(8))),
            (r"^\d{3}-\w+(\.\w+)?$", lambda rng: f"{rng.randrange(100, 1000)}-ab_c" + rng.choice(["", ".x1"]))]


def _leaf(rng: random.Random) -> tuple[Any, Any]:
    roll = rng.random()
    if roll < 0.75:
        fmt = rng.choice(sorted(FORMAT_REGEX))
        schema: dict[str, Any] = {"type": "string", "format": fmt}
        if rng.random() < 0.2:
            schema["description"] = "a " + fmt
        return schema, _value(rng, fmt)
    if roll < 0.9:
        pattern, make = rng.choice(PATTERNS)
        return {"type": "string", "pattern": pattern}, make(rng)
    return rng.choice([({"type": "integer"}, rng.randrange(100)), ({"type": "string"}, "free text"),
                       ({"enum": ["a", "b"]}, "a")])


def _gen(rng: random.Random, depth: int = 0) -> tuple[Any, Any]:
    if depth >= 2 or rng.random() < 0.3:
        return _leaf(rng)
    if rng.random() < 0.7:
        props: dict[str, Any] = {}
        inst: dict[str, Any] = {}
        for i in range(rng.randrange(1, 5)):
            s, v = _gen(rng, depth + 1)
            props[f"k{i}"] = s
            if rng.random() < 0.8:
                inst[f"k{i}"] = v
        required = [k for k in inst if rng.random() < 0.6]
        schema = {"type": "object", "properties": props, "required": required}
        if rng.random() < 0.3:
            schema["additionalProperties"] = False
        return schema, inst
    s, first = _gen(rng, depth + 1)
    n = rng.randrange(1, 4)
    values = [first]
    for _ in range(n - 1):
        values.append(_value(rng, s["format"]) if isinstance(s, dict) and "format" in s else _gen_like(rng, s))
    return {"type": "array", "items": s, **({"maxItems": n + rng.randrange(2)} if rng.random() < 0.5 else {})}, values


def _gen_like(rng: random.Random, schema: Any) -> Any:
    """Another value of a leaf or container schema made by `_gen` (same shape, fresh strings)."""
    if isinstance(schema, dict) and "pattern" in schema:
        return next(make(rng) for p, make in PATTERNS if p == schema["pattern"])
    if isinstance(schema, dict) and schema.get("type") == "object":
        return {k: _gen_like(rng, s) for k, s in schema["properties"].items() if k in schema.get("required", [])}
    if isinstance(schema, dict) and schema.get("type") == "array":
        return [_gen_like(rng, schema["items"])]
    return {"integer": 7, "string": "x"}.get(schema.get("type"), "a") if isinstance(schema, dict) else "a"


def _allowed(mask: np.ndarray, t: int) -> bool:
    return bool((int(mask[t >> 5]) >> (t & 31)) & 1)


def _walk(c: Any, ids: list[int], rng: random.Random, stray: float) -> tuple[int, int]:
    """Walk with reuse on and off side by side: rollbacks, and at random an id the mask allows instead of the
    instance's (then the walk follows the allowed ids to its end). Returns (steps, composed steps)."""
    on, off = c.matcher(), c.matcher(reuse_format_masks=False)
    a, b = c.allocate_bitmask(), c.allocate_bitmask()
    tracker = on.backend_matcher._strings
    if tracker is None:  # no string with a format or pattern in this schema
        assert not c.extra["track_strings"]
        return 0, 0
    steps = composed = 0
    pos = 0
    strayed = False
    for _ in range(400):
        if on.is_terminated():
            break
        ready = tracker.format_key is not None and on.backend_matcher.copies_mask
        on.fill_bitmask(a)
        off.fill_bitmask(b)
        assert np.array_equal(a, b), f"mask differs at step {steps} (format key {tracker.format_key})"
        steps += 1
        composed += ready
        if not strayed and pos < len(ids) and _allowed(b, ids[pos]) and rng.random() > stray:
            t = ids[pos]
        else:
            strayed = True
            allowed = np.flatnonzero(np.unpackbits(b.view(np.uint8), bitorder="little")[: c.vocab_size])
            if allowed.size == 0:
                break
            t = int(rng.choice(allowed.tolist()))
        assert on.accept(t) and off.accept(t)
        pos += 1
        if pos > 2 and rng.random() < 0.1:
            k = rng.randrange(1, min(pos, 5) + 1)
            on.rollback(k)
            off.rollback(k)
            pos -= k
    return steps, composed


def test_composed_masks_equal_llguidance_masks_on_random_format_schemas(tok) -> None:
    rng = random.Random(7070)
    total = composed = 0
    for n in range(45):
        schema, inst = _gen(rng)
        c = compile_constraint("json_schema", schema, tok, strict=n % 2 == 0, cache=None, timeout_s=300)
        ids = tok.encode_plain(json.dumps(inst, separators=(",", ":") if rng.random() < 0.7 else (", ", ": ")))
        for stray in (0.0, 0.05):
            s, m = _walk(c, ids, rng, stray)
            total += s
            composed += m
    assert total > 2000
    assert composed > 300  # the composition ran: the comparison above covered it


def test_batched_fill_composes_the_same_masks(tok, batched_masks_equal) -> None:
    schema = {"type": "object", "properties": {"u": {"type": "string", "format": "uri"},
                                               "e": {"type": "string", "format": "email"},
                                               "d": {"type": "array", "items": {"type": "string", "format": "date"}}}}
    c = compile_constraint("json_schema", schema, tok, strict=False, cache=None, timeout_s=300)
    rng = random.Random(3)
    docs = [{"u": _value(rng, "uri"), "e": _value(rng, "email"), "d": [_value(rng, "date") for _ in range(3)]}
            for _ in range(3)]
    id_lists = [tok.encode_plain(json.dumps(d)) for d in docs]
    for _ in range(2):  # the second pass finds inner masks learned by the first
        batched_masks_equal([c.matcher() for _ in docs], [c.matcher(reuse_format_masks=False) for _ in docs],
                            id_lists, c.allocate_bitmask().shape[0])


def _dfa_inner(dfa: Any, q: int, vocab: Any) -> np.ndarray:
    """The ids without a quote that keep the DFA alive from q, as mask words (what llguidance must allow)."""
    words = np.zeros((vocab.vocab_size + 31) // 32, dtype=np.uint32)
    for i, b in enumerate(vocab.token_bytes):
        if b and b'"' not in b and dfa.run(q, b) >= 0:
            words[i >> 5] |= np.uint32(1 << (i & 31))
    return words


@pytest.mark.parametrize("fmt", ["uri", "email", "date-time", "ipv6", "duration"])
def test_dfa_states_keep_alive_exactly_the_ids_llguidance_allows(tok, fmt: str) -> None:
    """Over the whole vocabulary, at the open states two random values pass through: the DFA is llguidance's."""
    vocab = vocabulary_of(tok)
    c = compile_constraint("json_schema", {"type": "string", "format": fmt}, tok, strict=False, cache=None,
                           timeout_s=300)
    dfa = string_dfa(FORMAT_REGEX[fmt])
    table = format_tables(vocab).get(dfa)
    rng = random.Random(fmt)
    checked = 0
    for _ in range(2):
        m = c.matcher(reuse_format_masks=False)
        mask = c.allocate_bitmask()
        ids = tok.encode_plain(json.dumps(_value(rng, fmt)))
        text = b""
        for t in ids[:-1]:
            assert m.accept(t)
            text += vocab.piece(t)
            q = dfa.run(0, text[1:])
            if q < 0 or not table.open[q] or checked >= 6:
                continue
            m.fill_bitmask(mask)
            got = mask.view(np.uint32) & quote_tokens(vocab).not_quote
            assert np.array_equal(got, _dfa_inner(dfa, q, vocab)), (fmt, text)
            assert table.learn(q, mask.view(np.uint32))  # and no quote-holding id outside T(q) is allowed
            checked += 1
    assert checked >= 3


def test_backslash_and_non_ascii_are_never_allowed_inside_a_format_string(tok) -> None:
    vocab = vocabulary_of(tok)
    for fmt in FORMAT_REGEX:
        c = compile_constraint("json_schema", {"type": "string", "format": fmt}, tok, strict=False, cache=None,
                               timeout_s=300)
        m = c.matcher(reuse_format_masks=False)
        assert m.accept(tok.encode_plain('"')[0])
        mask = c.allocate_bitmask()
        m.fill_bitmask(mask)
        for i, b in enumerate(vocab.token_bytes):
            if b and (b"\\" in b or max(b) >= 0x80):
                assert not _allowed(mask, i), (fmt, b)


def test_tracker_keys_only_strings_it_can_follow(tok) -> None:
    from recipe.constraints.string_masks import StringTracker

    vocab = vocabulary_of(tok)
    schema = {"type": "object", "properties": {
        "u": {"type": "string", "format": "uri"}, "n": {"type": "string", "format": "uri", "maxLength": 40},
        "p": {"type": "string", "pattern": "^[a-z]+$"}, "q": {"type": "string", "pattern": "[a-z]+"},
        "x": {"type": "string", "format": "made-up"}, "a": {"anyOf": [{"type": "string", "format": "email"}]}}}

    def key(text: str) -> Any:
        t = StringTracker(schema, vocab)
        for i in tok.encode_plain(text):
            t.advance(i)
        return t.format_key

    assert key('{"u":"https://ex') is not None
    assert key('{"u":"') is not None
    assert key('{"u":"a\\u0041') is None  # an escape ends the keying for this string
    assert key('{"u":"é') is None
    assert key('{"u":"https://x","') is None  # a key
    assert key('{"p":"abc') is not None
    for field in "nqxa":
        assert key('{"' + field + '":"abc') is None
    assert StringTracker(schema, vocab, formats=False).format_key is None
    c = compile_constraint("json_schema", schema, tok, strict=False, cache=None, timeout_s=300)
    assert c.extra["track_strings"]


def test_dfa_reads_only_the_regex_subset() -> None:
    for bad in ("[^a]", "a.b", "(?i)a", "a*?", "\\s", "é"):
        with pytest.raises(Unsupported):
            string_dfa(bad)
    for bad in ("[a-z]+", "^a|b$", "^a", "^[\"]$"):
        with pytest.raises(Unsupported):
            pattern_dfa(bad)
    d = pattern_dfa("^[A-Z]{2}[0-9]{3}$")
    assert d.run(0, b"AB123") in d.accepting and d.run(0, b"AB12") not in d.accepting and d.run(0, b"ab") == -1
