"""The exact rewrites behind `normalize.Rewrites`: string-enum negation (`if`/`then`/`else` and `not` on a
string discriminator), a pairwise disjoint `oneOf` as `anyOf`, `patternProperties` merged beside `properties`,
and `$ref`s into the draft 04/06/07 metaschemas.

Each is checked on schemas drawn widely by Hypothesis: instances generated from the *original* schema
(hypothesis-jsonschema) and their mutations, `jsonschema` on the original as the oracle. Soundness: the mask
never passes an instance the oracle rejects, and the report claims exactness only where the mask alone decides.
Coverage: the mask passes the valid instances (the rate is printed and must stay high). Equality with the
switch off: the verdict (mask, then the post-check the report declares) is the same either way.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("hypothesis_jsonschema")

from recipe.constraints import compile_constraint
from recipe.constraints.disjoint import disjoint
from recipe.constraints.instance_check import walk_ids
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.normalize import Rewrites, negate
from recipe.constraints.report import validate_value
from recipe.constraints.soundness import instance_text, instances
from recipe.constraints.string_complement import not_in

_TEXT = st.text(alphabet='ab.$-^]\\"é 😀', max_size=4)
_SCALARS = st.one_of(_TEXT, st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.0, 0.5, -2.0]))
_SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
_COVERAGE: dict[str, list[int]] = {}


@contextmanager
def _switch(name: str, on: bool) -> Iterator[None]:
    old = getattr(Rewrites, name)
    setattr(Rewrites, name, on)
    try:
        yield
    finally:
        setattr(Rewrites, name, old)


def _exact(c: Any) -> bool:
    return bool(c.report is not None and c.report.enforced_exactly)


def _verdict(c: Any, text: str, tok: Any) -> tuple[bool, bool]:
    """(mask passes, mask and the declared post-check pass)."""
    w = walk_ids(c, tok.encode_plain(text))
    assert w.unsound_steps == 0
    if not w.accepted:
        return False, False
    return True, _exact(c) or not c.validate(text)


def _check(tok: Any, schema: Any, switch: str, seed: int) -> None:
    """Soundness, coverage and equality with `switch` off, on instances of `schema` (see the module docstring)."""
    valid, invalid = instances(schema, random.Random(seed), n_valid=3, n_invalid=6, gen_budget_s=2.0)
    try:
        with _switch(switch, True):
            on = compile_constraint("json_schema", schema, tok, strict=False, cache=None)
        with _switch(switch, False):
            off = compile_constraint("json_schema", schema, tok, strict=False, cache=None)
    except ConstraintError as exc:  # only a schema that admits no value may be refused
        assert re.search("admits no value|Unsatisfiable", exc.message) and not valid, (schema, exc.message)
        return
    tally = _COVERAGE.setdefault(switch, [0, 0, 0])
    for ok, value in [(True, v) for v in valid] + [(False, v) for v in invalid]:
        assert (not validate_value(schema, value)) is ok
        text = instance_text(value, schema)
        mask_on, final_on = _verdict(on, text, tok)
        mask_off, final_off = _verdict(off, text, tok)
        if not ok:
            assert not final_on, ("unsound", schema, text, on.report)
            assert not final_off, ("unsound with the switch off", schema, text)
        else:
            tally[0] += 1
            tally[1] += mask_on
            tally[2] += mask_off
            # the rewrite never refuses what the unrewritten mask accepted
            assert mask_on or not mask_off, ("coverage fell", schema, text)
        assert final_on == final_off or (ok and not mask_on and mask_off), (schema, text)


@pytest.fixture(scope="module", autouse=True)
def _print_coverage() -> Iterator[None]:
    yield
    for name, (n, on, off) in sorted(_COVERAGE.items()):
        print(f"\n{name}: valid instances accepted by the mask {on}/{n} (switch off: {off}/{n})")


# ------------------------------------------------------------------------------------ string complement


@given(st.lists(_TEXT, max_size=6), st.lists(_TEXT, max_size=12))
@settings(max_examples=400, deadline=None)
def test_not_in_matches_exactly_the_strings_outside_the_set(members: list[str], probes: list[str]) -> None:
    rx = not_in(members)
    assert rx is not None
    for w in [*probes, *members, *(m + "a" for m in members), *(m[:-1] for m in members)]:
        assert (re.fullmatch(rx, w) is not None) == (w not in members), (members, w, rx)


@given(st.lists(_TEXT, min_size=1, max_size=4), st.lists(_TEXT, max_size=6))
@settings(max_examples=15, deadline=None)
def test_not_in_as_a_mask_pattern(tok, members: list[str], probes: list[str]) -> None:
    """The backend reads the regex as Python does (on the decoded string, escapes and all)."""
    c = compile_constraint("json_schema", {"type": "string", "pattern": not_in(members)}, tok, cache=None)
    assert _exact(c)
    for w in [*probes, *members]:
        assert walk_ids(c, tok.encode_plain(instance_text(w, {}))).accepted == (w not in members), (members, w)


@given(st.lists(_SCALARS, max_size=5), _SCALARS)
@settings(max_examples=300, deadline=None)
def test_enum_negation_is_exact(vals: list[Any], probe: Any) -> None:
    neg = negate({"enum": vals})
    assert neg is not None
    for v in [probe, *vals]:
        assert (not validate_value(neg, v)) == bool(validate_value({"enum": vals}, v)), (vals, v, neg)


# -------------------------------------------------------------------------------------- if / then / else


@st.composite
def _discriminated_if(draw: Any) -> dict[str, Any]:
    kinds = draw(st.lists(_SCALARS, min_size=1, max_size=4, unique_by=repr))
    cond = draw(st.lists(st.sampled_from(kinds) | _SCALARS, min_size=1, max_size=3, unique_by=repr))
    test: dict[str, Any] = {"properties": {"kind": {"const": cond[0]} if len(cond) == 1 else {"enum": cond}}}
    if draw(st.booleans()):
        test["required"] = ["kind"]
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False,
                              "properties": {"kind": {"enum": kinds}, "a": {"type": "integer"},
                                             "b": {"type": "string"}},
                              "if": test, "then": {"required": ["a"]}}
    if draw(st.booleans()):
        schema["else"] = {"properties": {"b": {"maxLength": 1}}, "required": ["b"]}
    if draw(st.booleans()):
        schema["required"] = ["kind"]
    return schema


@given(_discriminated_if(), st.integers(0, 2**32))
@_SETTINGS
def test_if_then_else_on_a_discriminator(tok, schema: dict[str, Any], seed: int) -> None:
    _check(tok, schema, "negate_mixed_enums", seed)
    c = compile_constraint("json_schema", schema, tok, strict=False, cache=None)
    assert _exact(c), c.report  # the point of the rewrite: no post-check left


@given(st.lists(_SCALARS, min_size=1, max_size=4), st.integers(0, 2**32))
@_SETTINGS
def test_not_enum(tok, vals: list[Any], seed: int) -> None:
    _check(tok, {"type": ["string", "integer", "null", "boolean"], "not": {"enum": vals}}, "negate_mixed_enums", seed)


# ------------------------------------------------------------------------------------------ disjoint oneOf


@st.composite
def _one_of(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(2, 4))
    tags = draw(st.lists(_SCALARS, min_size=n, max_size=n))  # not unique: overlapping branches occur too
    req = draw(st.booleans())
    branches: list[Any] = []
    for i, tag in enumerate(tags):
        kind = draw(st.sampled_from(["object", "type", "enum"]))
        if kind == "object":
            b: dict[str, Any] = {"type": "object", "properties": {"kind": {"const": tag}, f"f{i}": {"type": "integer"}}}
            if req:
                b["required"] = ["kind"]
            if draw(st.booleans()):
                b["additionalProperties"] = False
        elif kind == "type":
            b = {"type": draw(st.sampled_from(["string", "integer", "number", "null", "array"]))}
        else:
            b = {"enum": [tag]}
        branches.append(b)
    if draw(st.booleans()):  # through references
        return {"$defs": {f"d{i}": b for i, b in enumerate(branches)},
                "oneOf": [{"$ref": f"#/$defs/d{i}"} for i in range(n)]}
    return {"oneOf": branches}


@given(_one_of(), st.integers(0, 2**32))
@_SETTINGS
def test_disjoint_one_of(tok, schema: dict[str, Any], seed: int) -> None:
    _check(tok, schema, "disjoint_one_of", seed)


@given(st.lists(_SCALARS, min_size=1, max_size=3), st.lists(_SCALARS, min_size=1, max_size=3), _SCALARS)
@settings(max_examples=300, deadline=None)
def test_disjoint_is_never_wrong(a: list[Any], b: list[Any], probe: Any) -> None:
    """Whenever `disjoint` says so, no value (of the two enums, or drawn) satisfies both."""
    sa = {"type": "object", "required": ["k"], "properties": {"k": {"enum": a}}}
    sb = {"type": "object", "required": ["k"], "properties": {"k": {"enum": b}}}
    for x, y in ((sa, sb), ({"enum": a}, {"enum": b})):
        if not disjoint(x, y, {}):
            continue
        for v in [probe, *a, *b]:
            inst = {"k": v} if x is sa else v
            assert validate_value(x, inst) or validate_value(y, inst), (x, y, inst)


# -------------------------------------------------------------------------------- patternProperties merge


@st.composite
def _pattern_allof(draw: Any) -> dict[str, Any]:
    left: dict[str, Any] = {"properties": {"x-a": {"type": "string"}, "y": {"type": "integer"}}}
    right: dict[str, Any] = {"patternProperties": {draw(st.sampled_from(["^x-", "a$", "^y"])): {"maxLength": 2}}}
    if draw(st.booleans()):
        right["properties"] = {"x-b": {"type": "string"}}
    if draw(st.booleans()):
        right["patternProperties"]["^x-a"] = {"minLength": 1}
    closer = draw(st.sampled_from([None, "left", "right"]))
    if closer is not None:
        (left if closer == "left" else right)["additionalProperties"] = False
    return {"type": "object", "allOf": [left, right]}


@given(_pattern_allof(), st.integers(0, 2**32))
@_SETTINGS
def test_pattern_properties_beside_properties(tok, schema: dict[str, Any], seed: int) -> None:
    _check(tok, schema, "merge_pattern_properties", seed)


# ---------------------------------------------------------------------------------------------- metaschemas


def test_refs_into_a_metaschema_resolve(tok) -> None:
    meta = "http://json-schema.org/draft-07/schema#"
    schema = {"$schema": meta, "type": "object", "additionalProperties": False,
              "properties": {"n": {"$ref": meta + "/definitions/nonNegativeInteger"},
                             "t": {"$ref": meta + "/definitions/simpleTypes"},
                             "d": {"$ref": meta + "/definitions/nonNegativeIntegerDefault0"}}}
    c = compile_constraint("json_schema", schema, tok, strict=True, cache=None)
    assert _exact(c)
    checked = 0
    for seed in range(6):
        valid, invalid = instances(schema, random.Random(seed), n_valid=3, n_invalid=6, gen_budget_s=2.0)
        for ok, value in [(True, v) for v in valid] + [(False, v) for v in invalid]:
            assert (not validate_value(schema, value)) is ok
            assert _verdict(c, instance_text(value, schema), tok) == (ok, ok), value
            checked += 1
    assert checked >= 12
    with _switch("metaschemas", False):  # left to the backend: refused, or compiled but not claimed exact
        try:
            off = compile_constraint("json_schema", schema, tok, strict=False, cache=None)
        except ConstraintError:
            return
    assert not _exact(off)


# ------------------------------------------------------------------------- classes inside JSON strings

_CLASS_CHARS = st.sampled_from(['"', "\\\\", "a", "é", "\\n", "\\r", "\\x00", "\\x01", "\\x1f", "/", " ", "\\t"])
_PROBES = ['"', "\\", "a", "b", "é", "\n", "\r", "\x01", "\x1f", "\x00", "/", " ", "\t", "z", "😀"]


@given(st.lists(_CLASS_CHARS, min_size=1, max_size=4), st.booleans())
@settings(max_examples=40, deadline=None)
def test_character_classes_mean_inside_json_strings_what_they_mean(tok, members: list[str], negated: bool) -> None:
    """A pattern's class passes exactly the characters Python's `re` says it does, raw NUL aside (a class that
    admits every control character also loses NUL: `loosen._escape_safe_class`); never one more."""
    pattern = "^[" + ("^" if negated else "") + "".join(members) + "]$"
    c = compile_constraint("json_schema", {"type": "string", "pattern": pattern}, tok, strict=False, cache=None)
    for ch in _PROBES:
        want = re.fullmatch(pattern, ch) is not None
        got = walk_ids(c, tok.encode_plain(instance_text(ch, {}))).accepted
        assert got <= want or (not _exact(c) and c.validate(instance_text(ch, {}))), (pattern, ch)
        if ch != "\x00":
            assert got == want, (pattern, ch)


# ------------------------------------------------------------------------------- enums beside keywords


@st.composite
def _enum_beside(draw: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"enum": draw(st.lists(_SCALARS, min_size=1, max_size=5, unique_by=repr))}
    for k, v in draw(st.dictionaries(st.sampled_from(["type", "maxLength", "pattern", "minimum", "not"]),
                                     st.none(), max_size=3)).items():
        del v
        s[k] = {"type": draw(st.sampled_from(["string", ["string", "null"], "integer", ["number", "boolean"]])),
                "maxLength": draw(st.integers(0, 2)), "pattern": draw(st.sampled_from(["^a", "b$", "^$", "é"])),
                "minimum": draw(st.integers(-2, 2)), "not": {"enum": draw(st.lists(_SCALARS, max_size=2))}}[k]
    return {"type": "object", "properties": {"v": s}, "required": ["v"]}


@given(_enum_beside(), st.integers(0, 2**32))
@_SETTINGS
def test_enum_beside_other_keywords(tok, schema: dict[str, Any], seed: int) -> None:
    _check(tok, schema, "filter_enums", seed)
