"""What a schema that cannot be enforced gets: a loosened mask with the rest enforced and the loosened part
post-checked (`strict=False`), or a refusal that says what the backend met."""

from __future__ import annotations

import pytest

from recipe.constraints import compile_constraint
from recipe.constraints.instance_check import check_value
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.loosen import after_error, explain


def test_relative_remote_refs_are_all_post_checked_and_the_rest_enforced(tok) -> None:
    """The backend resolves a relative reference against its own base and names it so; every remote reference
    is then dropped at once (it fetches none of them), and listed as unsupported."""
    schema = {"type": "object", "required": ["n"],
              "properties": {"n": {"type": "integer"},
                             **{f"r{i}": {"$ref": f"../../../schematics/angular/s{i}/schema.json"} for i in range(20)}}}
    c = compile_constraint("json_schema", schema, tok, strict=False, cache=None)
    assert c.report is not None and "$ref" in c.report.unsupported and not c.report.enforced_exactly
    assert check_value(c, {"n": 1, "r3": {"any": "thing"}}, tok).accepted
    assert not check_value(c, {"n": "one"}, tok).accepted
    assert not check_value(c, {"r3": 1}, tok).accepted
    with pytest.raises(ConstraintError, match=r"unsupported: \$ref"):
        compile_constraint("json_schema", schema, tok, strict=True, cache=None)


def test_a_refusal_naming_no_remote_document_loosens_nothing() -> None:
    schema = {"properties": {"a": {"$ref": "other.json"}}}
    msg = "Resource 'json-schema:///elsewhere.json' is not present in a registry and retrieving it failed"
    assert after_error(schema, msg) is None
    step = after_error(schema, msg.replace("elsewhere", "other"))
    assert step is not None and step[0] == {"properties": {"a": {}}} and step[1] == {"$ref"}


def test_refusals_nothing_can_loosen_say_what_they_mean() -> None:
    msg = "llguidance: circular references with sibling keys are not supported: json-schema:///#/$defs/recipe_3"
    assert explain(msg).startswith(msg) and "recursive `$ref`" in explain(msg)
    assert "size limit" in explain("llguidance: schema too large")
    assert explain("llguidance: something else") == "llguidance: something else"
