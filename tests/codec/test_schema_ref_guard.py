"""The `$ref` walk of tool schemas is skipped only when the compact text has no `"$ref"`: the problem found
is the one the unconditional walk finds, on drawn schemas with good, bad and escaped references."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.protocols.tools import _check_schema, _first_bad_ref, compact_json

_refs = st.sampled_from(["#", "#/$defs/a", "#/$defs/missing", "#/properties/x", "#/nope", "other.json", "#/$defs/a~1b"])
_leaf = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "object"])}),
    st.fixed_dictionaries({"$ref": _refs}),
    st.fixed_dictionaries({"description": st.sampled_from(["$ref", '"$ref"', "see #/nope"])}),
)
_schemas = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(
            st.sampled_from(["x", "$ref", "y"]), inner, max_size=3)}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"$defs": st.fixed_dictionaries({"a": inner}), "items": inner}),
    ),
    max_leaves=8,
)


def _unguarded(schema: Any) -> str | None:
    bad = _first_bad_ref(schema, schema)
    return None if bad is None else f"Pointer '{bad}' does not exist"


@settings(max_examples=300, deadline=None)
@given(_schemas)
def test_guarded_walk_finds_what_the_full_walk_finds(schema: dict[str, Any]) -> None:
    problem = _check_schema(compact_json(schema))
    if problem is None or problem.startswith("Pointer '"):
        assert problem == _unguarded(schema)


def test_escaped_ref_key_in_the_body_is_still_found() -> None:
    schema = json.loads('{"type": "object", "properties": {"a": {"\\u0024ref": "#/nope"}}}')
    assert _check_schema(compact_json(schema)) == "Pointer '/nope' does not exist"
