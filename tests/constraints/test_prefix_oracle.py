"""`prefix_oracle`: each rule fires where the prefix stops being viable, and nowhere on a valid text."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.constraints.prefix_oracle import PrefixOracle
from recipe.constraints.report import validate_value

OBJ = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
                                        "kind": {"enum": ["cat", "cow"]},
                                        "code": {"type": "string", "pattern": "^[a-z]+$"},
                                        "n": {"type": "integer", "maximum": 9},
                                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                                        "ok": {"const": True}},
       "required": ["name"], "additionalProperties": False}

CASES: list[tuple[Any, str, int, str]] = [
    # (schema, invalid text, index of the first dead character, rule)
    (OBJ, '{"name":5}', 8, "type"),
    (OBJ, '{"name":"abcde"}', 13, "maxLength"),
    (OBJ, '{"name":"a","kind":"cax"}', 22, "enum"),
    (OBJ, '{"name":"a","code":"ab1"}', 22, "pattern"),
    (OBJ, '{"name":"a","n":10}', 18, "value"),  # a number is complete at the character after it
    (OBJ, '{"name":"a","tags":["x","y","z"]}', 27, "maxItems"),  # the comma before the third item
    (OBJ, '{"name":"a","ok":false}', 17, "enum"),  # const true: `f` starts no spelling of it
    (OBJ, '{"name":"a","nx":1}', 14, "additionalProperties"),
    (OBJ, '{"kind":"cat"}', 13, "value"),  # `name` is required: the closing brace is dead
    ({"$ref": "#/definitions/s", "definitions": {"s": {"type": "string"}}}, "[]", 0, "type"),
    ({"allOf": [{"type": "object"}, {"properties": {"a": {"type": "null"}}}]}, '{"a":0}', 5, "type"),
    ({"type": "object", "additionalProperties": False}, '{"a":1}', 1, "additionalProperties"),
    ({"type": "object", "patternProperties": {"^x": {}}, "additionalProperties": False}, '{"y":1}', 2,
     "additionalProperties"),
    ({"type": "integer"}, "1.5", 3, "value"),
]


@pytest.mark.parametrize(("schema", "text", "at", "rule"), CASES)
def test_the_first_dead_character(schema: Any, text: str, at: int, rule: str) -> None:
    assert validate_value(schema, json.loads(text))
    dead = PrefixOracle(schema).first_dead(text)
    assert dead is not None and (dead.at, dead.rule) == (at, rule)


@pytest.mark.parametrize("text", ['{"name":"abcd","kind":"cow","code":"xyz","n":9,"tags":["a","b"],"ok":true}',
                                  '{"name":""}', '{"name":"\\\\\\"","code":"q"}'])
def test_no_rule_fires_on_a_valid_text(text: str) -> None:
    assert not validate_value(OBJ, json.loads(text))
    assert PrefixOracle(OBJ).first_dead(text) is None


def test_choices_make_no_claim() -> None:
    """`anyOf` is not a conjunct: a value another branch admits is not dead at its first character."""
    schema = {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 5}]}
    dead = PrefixOracle(schema).first_dead("3")
    assert dead is not None and dead.at == 1  # only the complete value fails the root


def test_a_backslash_is_never_dead_inside_a_pattern() -> None:
    """`\\u0061` spells `a`: the escape's backslash is viable, the escape's last character decides."""
    schema = {"type": "string", "pattern": "^[a-z]+$"}
    assert PrefixOracle(schema).first_dead('"\\u0061"') is None
    dead = PrefixOracle(schema).first_dead('"\\u0031"')
    assert dead is not None and dead.at == 6 and dead.rule == "pattern"


# ------------------------------------------------------------------ a claim is never a viable prefix

_SCALARS: list[Any] = ["", "a", "ab", "b", "ba", 0, 3, -1, 1.5, True, False, None]
_KEYS = ["a", "ab", "b"]


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    string = st.fixed_dictionaries({"type": st.just("string")}, optional={
        "maxLength": st.integers(0, 2), "pattern": st.sampled_from(["^a", "b$", "^[ab]$", "a"]),
        "enum": st.lists(st.sampled_from(["", "a", "ab", "ba"]), min_size=1, max_size=3, unique=True)})
    integer = st.fixed_dictionaries({"type": st.sampled_from(["integer", "number", ["integer", "null"]])},
                                    optional={"maximum": st.integers(0, 3)})
    choice = st.lists(st.sampled_from(_SCALARS), min_size=1, max_size=3, unique_by=json.dumps).map(
        lambda vs: {"enum": vs})
    return st.one_of(string, integer, choice, st.sampled_from([{"const": True}, {"type": "boolean"}, {}]))


def _object() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just("object"),
         "properties": st.dictionaries(st.sampled_from(_KEYS), _leaf(), min_size=1, max_size=3)},
        optional={"required": st.lists(st.sampled_from(_KEYS), max_size=2, unique=True),
                  "additionalProperties": st.one_of(st.just(False), _leaf()),
                  "patternProperties": st.sampled_from([{"^b": {"type": "string"}}, {"b$": {"const": 0}}]),
                  "maxProperties": st.integers(0, 2)})


def _array() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.just("array"), "items": _leaf()},
                                 optional={"maxItems": st.integers(0, 2),
                                           "prefixItems": st.lists(_leaf(), min_size=1, max_size=2)})


def _schema() -> st.SearchStrategy[Any]:
    base = st.one_of(_object(), _array(), _leaf())
    return st.one_of(base, st.tuples(base, base).map(lambda ab: {"allOf": list(ab)}),
                     base.map(lambda s: {"$ref": "#/$defs/s", "$defs": {"s": s}}))


def _domain() -> list[Any]:
    """Every scalar, every array of up to two scalars, every object over `_KEYS` with scalar values, each in
    every key order (the oracle must hold whatever order a text uses)."""
    small = ["", "a", "b", 0, 1.5, True, None]
    objects: list[Any] = [{}]
    for key in _KEYS:
        objects += [{**o, key: v} for o in objects for v in small]
    ordered = [dict(p) for o in objects for p in itertools.permutations(o.items())]
    arrays = [[]] + [[v] for v in _SCALARS] + [[v, w] for v in small for w in small]
    return _SCALARS + arrays + ordered


_TEXTS = [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in _domain()]


@settings(max_examples=60, deadline=None)
@given(schema=_schema(), rnd=st.randoms(use_true_random=False))
def test_a_dead_prefix_starts_no_valid_text(schema: Any, rnd: random.Random) -> None:
    """Falsification over a finite domain: a claim `t[:U+1]` is a prefix of no text of a valid domain value,
    and no rule fires on a valid text; the invalid texts are the domain's rejected values and one-character
    edits of valid ones."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    valid = [t for t in _TEXTS if validator.is_valid(json.loads(t))]
    invalid = [t for t in _TEXTS if t not in set(valid)]
    prefixes = {t[:k] for t in valid for k in range(len(t) + 1)}
    oracle = PrefixOracle(schema)
    for t in rnd.sample(valid, min(40, len(valid))):
        assert oracle.first_dead(t) is None, t
    edits = []
    for t in rnd.sample(valid, min(40, len(valid))):
        k = rnd.randrange(len(t))
        edits.append(t[:k] + rnd.choice('"ab0-1.}],:{[tn') + t[k + 1:])
    for t in rnd.sample(invalid, min(120, len(invalid))) + edits:
        dead = oracle.first_dead(t)
        if dead is not None:
            assert t[:dead.at + 1] not in prefixes or (dead.at == len(t) and t not in valid), (t, dead)
