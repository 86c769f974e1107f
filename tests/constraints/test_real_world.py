"""Real-world schemas: each cause that used to sink a whole schema under `strict=False` now compiles with the
keyword moved to the post-check (and `strict=True` still refuses, naming it); the SchemaStore corpus's
figures stay at the goals (a fast slice here, the full corpus under `-m slow`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recipe.constraints import ConstraintError, compile_constraint
from recipe.constraints.instance_check import check_text, check_value
from recipe.constraints.real_world import Tally, in_fast_slice, load_corpus, run_schema
from recipe.constraints.schema_order import in_schema_order

CORPUS = Path(__file__).resolve().parents[1] / "data" / "real_world_schemas" / "corpus.jsonl.gz"
FIGURES = Path(__file__).with_name("real_world_figures.json")
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _compiled(schema: Any, tok: Any, strict: bool = False, **kw: Any) -> Any:
    # a generous timeout: the first compile of a session builds the backend's tokenizer, on a shared machine
    return compile_constraint("json_schema", schema, tok, strict=strict, cache=None, timeout_s=120, **kw)


def _refused(schema: Any, tok: Any, **kw: Any) -> str:
    with pytest.raises(ConstraintError) as exc:
        _compiled(schema, tok, strict=True, **kw)
    return exc.value.message


def test_look_around_in_pattern_goes_to_the_post_check(tok) -> None:
    schema = {"type": "object", "properties": {"key": {"type": "string", "pattern": "^(?!@@)[@a-z]+$"}},
              "required": ["key"]}
    c = _compiled(schema, tok)
    assert "pattern" in c.report.post and not c.report.enforced_exactly
    assert check_value(c, {"key": "abc"}, tok).accepted
    assert not check_value(c, {"key": "ABC"}, tok).accepted  # the rest of the pattern is still masked
    assert c.validate('{"key": "@@x"}')  # what the mask lets through, the post-check catches
    assert "pattern" in _refused(schema, tok)


def test_look_around_in_pattern_properties_key_is_folded_not_dropped(tok) -> None:
    schema = {"type": "object", "patternProperties": {"^(?!x)[a-z]+$": {"type": "integer"}},
              "additionalProperties": {"type": "boolean"}}
    c = _compiled(schema, tok)
    assert "patternProperties" in c.report.post
    assert check_value(c, {"ab": 1, "X": True}, tok).accepted
    assert check_value(c, {"xy": True}, tok).accepted  # "xy" takes additionalProperties: still reachable
    assert not check_value(c, {"ab": "s"}, tok).accepted
    assert "patternProperties" in _refused(schema, tok)


def test_ref_to_a_supplied_recursive_document_reaches_the_mask(tok) -> None:
    tree = {"$id": "https://example.com/tree.json", "type": "object",
            "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["v"], "additionalProperties": False}
    schema = {"type": "object", "properties": {"root": {"$ref": "https://example.com/tree.json"}}}
    resources = {"https://example.com/tree.json": tree}
    c = _compiled(schema, tok, strict=True, resources=resources)
    assert c.report.enforced_exactly
    assert check_value(c, {"root": {"v": 1, "kids": [{"v": 2, "kids": []}]}}, tok).accepted
    assert not check_value(c, {"root": {"v": 1, "kids": [{"kids": []}]}}, tok).accepted
    assert not c.validate('{"root": {"v": 1, "kids": [{"v": 2}]}}')  # the post-check reads the resource too


def test_circular_reference_with_sibling_keywords_is_exact(tok) -> None:
    schema = {"$defs": {"n": {"type": "object", "properties": {
        "c": {"$ref": "#/$defs/n", "required": ["d"]}, "d": {"type": "integer"}}}}, "$ref": "#/$defs/n"}
    c = _compiled(schema, tok, strict=True)
    assert check_value(c, {"c": {"c": {"d": 1}, "d": 2}, "d": 3}, tok).accepted
    assert not check_value(c, {"c": {"c": {}, "d": 2}}, tok).accepted


def test_base_uri_with_fragment(tok) -> None:
    schema = {"$schema": DRAFT7, "$id": "https://example.com/c.json#", "type": "object",
              "definitions": {"rel": {"$id": "#relation", "type": "object",
                                      "properties": {"target": {"$ref": "#/definitions/ref"}}, "required": ["target"]},
                              "ref": {"type": "string", "minLength": 2}},
              "properties": {"r": {"$ref": "#relation"}}}
    c = _compiled(schema, tok, strict=True)
    assert check_value(c, {"r": {"target": "ab"}}, tok).accepted
    assert not check_value(c, {"r": {"target": "a"}}, tok).accepted


def test_catch_all_pattern_property_beside_specific_ones(tok) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "object"}},
              "patternProperties": {".*": {"type": "object"}, "^_execute$": {"type": "object",
                                                                               "required": ["k"]}}}
    c = _compiled(schema, tok)
    assert "patternProperties" in c.report.post
    assert check_value(c, {"name": {}, "_execute": {"k": 1}, "other": {}}, tok).accepted
    assert not check_value(c, {"name": {}, "other": 3}, tok).accepted
    assert c.validate('{"_execute": {}}')
    assert "patternProperties" in _refused(schema, tok)


def test_draft04_and_huge_integer_bounds(tok) -> None:
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "properties": {
        "long": {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807},
        "pos": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False}},
        "dependencies": {"pos": ["long"]}}
    c = _compiled(schema, tok)
    assert "minimum" in c.report.post
    assert check_value(c, {"long": -5, "pos": 0.5, "pair": ["a", 1]}, tok).accepted
    for bad in ({"pos": 0}, {"pair": ["a", 1, 2]}, {"pos": 1}):  # exclusive bound, tuple length, dependency
        assert not check_value(c, bad, tok).accepted, bad


def test_property_counts_beside_optional_properties_do_not_refuse_valid_objects(tok) -> None:
    schema = {"type": "object", "minProperties": 1, "properties": {"a": {"type": "integer"}, "b": {}}}
    c = _compiled(schema, tok)
    assert check_value(c, {"b": True}, tok).accepted and check_value(c, {"a": 1}, tok).accepted
    assert c.validate("{}") and "minProperties" in c.report.post


def test_keys_are_generated_in_schema_order_and_the_report_says_so(tok) -> None:
    schema = {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "integer"}},
              "anyOf": [{"properties": {"m": {"type": "string"}}, "required": ["m"]}, {"required": ["z"]}]}
    c = _compiled(schema, tok)
    assert check_text(c, '{"z":1,"a":2,"m":"x"}', tok).accepted
    assert not check_text(c, '{"a":2,"z":1,"m":"x"}', tok).accepted
    assert "schema order" in c.report.to_dict()["object_keys"]
    assert list(in_schema_order({"m": "x", "a": 2, "q": 0, "z": 1}, schema)) == ["z", "a", "m", "q"]


def test_schema_order_follows_refs_branches_and_old_draft_ref_overrides() -> None:
    schema = {"$schema": DRAFT7, "definitions": {"p": {"properties": {"y": {"type": "object", "properties": {
        "b": {}, "a": {}}}, "x": {}}}},
        "properties": {"w": {"$ref": "#/definitions/p", "properties": {"ignored": {}}}}}
    got = in_schema_order({"w": {"x": 1, "ignored": 0, "y": {"a": 1, "b": 2}}}, schema)
    assert json.dumps(got) == '{"w": {"y": {"b": 2, "a": 1}, "x": 1, "ignored": 0}}'


def _check(total: Tally, recorded: dict[str, Any]) -> None:
    f = total.figures()
    assert total.unsound == 0
    for k in ("compiled", "valid_accepted", "invalid_rejected", "invalid_rejected_by_mask"):
        assert f[k] >= recorded[k], (k, "fell", f, recorded, total.failures)


def test_real_world_slice(tok) -> None:
    """The fast slice's figures (recorded by `bench/schemas_real_world.py --write-figures`) never fall."""
    total = Tally()
    for i, rec in enumerate(load_corpus(CORPUS)):
        if in_fast_slice(i, rec["name"]):
            total.add(run_schema(rec, tok))
    recorded = json.loads(FIGURES.read_text())["slice"]
    assert total.schemas == recorded["schemas"] >= 30
    _check(total, recorded)


@pytest.mark.slow
def test_real_world_corpus_meets_the_goals(tok) -> None:
    total = Tally()
    for rec in load_corpus(CORPUS):
        total.add(run_schema(rec, tok))
    f = total.figures()
    assert f["compiled_rate"] >= 0.97 and f["accepted_rate"] >= 0.97 and f["rejected_rate"] >= 0.95, f
    _check(total, json.loads(FIGURES.read_text())["recipe"])
