"""`close_objects` only ever narrows a schema: whatever the closed schema accepts, the original accepts.

Checked with `jsonschema` (the oracle) on every schema and instance of the official JSON-Schema-Test-Suite
(draft 2020-12), and on random objects drawn against random object schemas; plus the positions where
closing would widen or empty a schema, which must come back unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from recipe.constraints.closed_objects import close_objects
from recipe.constraints.suite import load_remotes

DATA = Path(__file__).resolve().parents[1] / "data" / "json-schema-test-suite"
SUITE = DATA / "draft2020-12"
# The suite's remote documents (http://localhost:1234/...), served from its folder instead of the network.
REGISTRY: Registry[Any] = Registry().with_resources(
    (uri, Resource.from_contents(doc, default_specification=DRAFT202012))
    for uri, doc in load_remotes(DATA / "remotes").items()
)


def suite_cases() -> list[tuple[str, Any, list[Any]]]:
    cases = []
    for path in sorted(SUITE.glob("*.json")):
        for group in json.loads(path.read_text()):
            cases.append((f"{path.stem}: {group['description']}", group["schema"], [t["data"] for t in group["tests"]]))
    return cases


def valid(schema: Any, instance: Any) -> bool:
    return jsonschema.Draft202012Validator(schema, registry=REGISTRY).is_valid(instance)


@pytest.mark.parametrize(("name", "schema", "instances"), suite_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_closing_never_accepts_what_the_schema_rejects(name: str, schema: Any, instances: list[Any]) -> None:
    closed = close_objects(schema)
    for instance in instances:
        if valid(closed, instance):
            assert valid(schema, instance), (name, instance)


def test_the_suite_is_there() -> None:
    assert len(suite_cases()) > 50


keys = st.sampled_from(["a", "b", "c", "name", "tags"])
leaf = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {}, {"enum": [1, "x"]}])


def object_schemas(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    value = leaf if depth == 0 else st.one_of(leaf, st.deferred(lambda: object_schemas(depth - 1)),
                                              st.builds(lambda s: {"type": "array", "items": s}, leaf))
    return st.builds(
        lambda props, req, extra: {"type": "object", "properties": props,
                                   "required": [k for k in req if k in props], **extra},
        st.dictionaries(keys, value, max_size=3), st.lists(keys, max_size=2, unique=True),
        st.sampled_from([{}, {"minProperties": 1}, {"anyOf": [{"required": ["a"]}, {}]}]),
    )


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["x", ""])),
                           lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=4)),
                           max_leaves=10)


def wrapped_schemas() -> st.SearchStrategy[dict[str, Any]]:
    """Object schemas, alone and inside the positions where closing would widen them (`not`, `oneOf`, ...)."""
    objects = object_schemas(1)
    return st.one_of(
        object_schemas(),
        st.builds(lambda s: {"not": s}, objects),
        st.builds(lambda a, b: {"oneOf": [a, b]}, objects, objects),
        st.builds(lambda a, b: {"allOf": [a, b]}, objects, objects),
        st.builds(lambda a, b: {"if": a, "then": b}, objects, objects),
        st.builds(lambda a: {"type": "object", "properties": {"a": {"not": a}}}, objects),
    )


@settings(max_examples=600, deadline=None)
@given(schema=wrapped_schemas(), instance=json_values)
def test_closed_random_schemas_are_subsets(schema: dict[str, Any], instance: Any) -> None:
    closed = close_objects(schema)
    if valid(closed, instance):
        assert valid(schema, instance)


@settings(max_examples=100, deadline=None)
@given(schema=object_schemas())
def test_declared_objects_are_closed_and_the_input_is_kept(schema: dict[str, Any]) -> None:
    before = json.dumps(schema, sort_keys=True)
    closed = close_objects(schema)
    assert json.dumps(schema, sort_keys=True) == before
    if "anyOf" not in schema and schema.get("minProperties", 0) <= len(schema["properties"]):
        assert closed["additionalProperties"] is False
        assert not valid(closed, {"zz_undeclared": 1, **{k: None for k in schema["properties"]}})


@pytest.mark.parametrize("schema", [
    {"not": {"type": "object", "properties": {"a": {}}}},
    {"oneOf": [{"type": "object", "properties": {"a": {}}}, {"type": "object", "required": ["b"]}]},
    {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]},
    {"$ref": "#/$defs/x", "properties": {"b": {}}, "$defs": {"x": {"type": "object", "properties": {"a": {}}}}},
    {"type": "object", "properties": {"a": {}}, "if": {"required": ["a"]}, "then": {"properties": {"b": {}}}},
    {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": {"type": "string"}},
])
def test_non_monotone_schemas_are_left_as_they_are(schema: dict[str, Any]) -> None:
    assert close_objects(schema) == schema


@pytest.mark.parametrize("schema", [
    {"type": "object", "required": ["x"]},
    {"type": "object", "properties": {"a": {}}, "minProperties": 2},
    {"type": "object", "patternProperties": {"^x": {}}},
    {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
])
def test_objects_closing_would_empty_or_that_decide_further_keys_stay_open(schema: dict[str, Any]) -> None:
    assert close_objects(schema).get("additionalProperties") == schema.get("additionalProperties")


def test_pydantic_style_definitions_are_closed() -> None:
    schema = {"$defs": {"Pet": {"properties": {"name": {"type": "string"}}, "required": ["name"], "type": "object"}},
              "properties": {"pets": {"items": {"$ref": "#/$defs/Pet"}, "type": "array"},
                             "owner": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
              "required": ["pets"], "type": "object", "title": "Household"}
    closed = close_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["$defs"]["Pet"]["additionalProperties"] is False
    assert valid(closed, {"pets": [{"name": "Rex"}], "owner": None})
    assert not valid(closed, {"pets": [{"name": "Rex", "age": 3}]})
