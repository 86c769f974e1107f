"""The keywords issue 44 lists as still refused (`if`/`then`/`else` on a non-discriminator, `dependentSchemas`
and draft-07 `dependencies`, `patternProperties` beside `additionalProperties`, `unevaluatedProperties` /
`unevaluatedItems`, recursive `$ref`s, `format`s): on Hypothesis-drawn schemas each is either enforced
soundly or refused with a clear error, never a silent partial constraint.

* strict: the schema compiles reported exact, or `ConstraintError` names a keyword the schema uses;
* non-strict, through the differential checker (`soundness.check_schema`: `hypothesis-jsonschema`
  instances, their mutations, `jsonschema` as the oracle): no invalid instance passes both the mask and the
  post-check, no valid one (in schema key order) is refused, and on a schema reported exact every invalid one
  is blocked by its first invalid character (`prefix_oracle`);
* a keyword the mask loosened is listed as post-checked (the report is never exact then).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("hypothesis_jsonschema")

from recipe.constraints import compile_constraint, soundness
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.report import keywords

# `hostname`, `date-time`, `time` and `uri` are left out: the mask asserts them, the judge (`jsonschema` without
# its optional format packages) does not, so a string the judge accepts may be refused (completeness, never
# soundness; structured-output-soundness.md, "Not covered yet")
_FORMATS = ["date", "email", "ipv4", "uuid", "uri-reference", "regex", "idn-email"]


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.just({"type": "string"}),
        st.integers(0, 5).map(lambda n: {"type": "integer", "minimum": n}),
        st.integers(1, 4).map(lambda n: {"type": "string", "maxLength": n}),
        st.lists(st.sampled_from(["x", "y", "zz", 1, None]), min_size=1, max_size=3, unique=True).map(
            lambda vs: {"enum": vs}),
        st.sampled_from(_FORMATS).map(lambda f: {"type": "string", "format": f}),
    )


def _props(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({k: _leaf() for k in keys})


@st.composite
def _if_then_else(draw: st.DrawFn) -> dict[str, Any]:
    cond = draw(st.one_of(st.integers(0, 5).map(lambda n: {"properties": {"a": {"minimum": n}}, "required": ["a"]}),
                          st.just({"required": ["b"]}),
                          st.integers(1, 3).map(lambda n: {"properties": {"a": {"maxLength": n}}})))
    out = {"type": "object", "properties": draw(_props(["a", "b", "c"])), "if": cond,
           "then": draw(st.sampled_from([{"required": ["c"]}, {"properties": {"c": {"type": "string"}}}]))}
    if draw(st.booleans()):
        out["else"] = draw(st.sampled_from([{"required": ["b"]}, {"properties": {"b": {"const": "x"}}}]))
    return out


@st.composite
def _dependent(draw: st.DrawFn) -> dict[str, Any]:
    sub = draw(st.sampled_from([{"required": ["b"]}, {"properties": {"b": {"type": "integer"}}},
                                {"properties": {"c": {"enum": ["x"]}}, "required": ["c"]}]))
    props = draw(_props(["a", "b", "c"]))
    if draw(st.booleans()):
        return {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": props,
                "dependencies": {"a": sub if draw(st.booleans()) else ["b"]}}
    return {"type": "object", "properties": props, "dependentSchemas": {"a": sub}}


@st.composite
def _pattern_additional(draw: st.DrawFn) -> dict[str, Any]:
    return {"type": "object", "properties": draw(_props(["a", "xa"])),
            "patternProperties": {draw(st.sampled_from(["^x", "a$", "^[a-c]+$"])): draw(_leaf())},
            "additionalProperties": draw(st.one_of(st.just(False), _leaf()))}


@st.composite
def _unevaluated(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"type": "array", "prefixItems": [draw(_leaf())], "unevaluatedItems": draw(st.just(False) | _leaf())}
    return {"type": "object", "allOf": [{"properties": draw(_props(["a"]))}], "properties": draw(_props(["b"])),
            "unevaluatedProperties": draw(st.one_of(st.just(False), _leaf()))}


@st.composite
def _recursive(draw: st.DrawFn) -> dict[str, Any]:
    node = {"type": "object", "properties": {"v": draw(_leaf()), "next": {"$ref": "#/$defs/node"}},
            "additionalProperties": draw(st.booleans())}
    if draw(st.booleans()):
        node["required"] = ["v"]
    return {"$defs": {"node": node}, "$ref": "#/$defs/node"}


_SCHEMAS = st.one_of(_if_then_else(), _dependent(), _pattern_additional(), _unevaluated(), _recursive())


@given(_SCHEMAS, st.integers(0, 2**32))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_each_keyword_is_enforced_soundly_or_refused_clearly(tok, schema: dict[str, Any], seed: int) -> None:
    used = set(keywords(schema))
    try:
        strict = compile_constraint("json_schema", schema, tok, strict=True, cache=None)
        assert strict.report is not None and strict.report.enforced_exactly, strict.report
        event("strict: exact")
    except ConstraintError as exc:
        assert any(k in exc.message for k in used), exc.message
        event(f"strict: refused ({exc.message[40:110]})")
    loose = compile_constraint("json_schema", schema, tok, strict=False, cache=None)
    assert loose.report is not None
    if loose.report.post or loose.report.unsupported:
        assert not loose.report.enforced_exactly
    t = soundness.check_schema("drawn", schema, tok, random.Random(seed), gen_budget_s=2.0)
    failures = "\n".join(t.failures)
    event(f"instances: {'yes' if t.valid else 'none'}, first char exact+bounded {t.first_char_exact + t.first_char_bounded}")
    assert t.unsound == 0 and t.unsound_steps == 0, failures
    assert t.valid_accepted == t.valid, failures
    assert t.first_char_late == 0 and t.oracle_errors == 0, failures
