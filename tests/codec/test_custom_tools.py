"""Responses custom tools beyond the reference (`recipe.protocols.leniency`), each rule as an equality with
the reference's own conversion of a rewritten body, over bodies drawn by the golden generators.

* a custom tool other than `apply_patch` converts as the function tool with one raw-text parameter `input`;
  the reference (strict mode) rejects it;
* a custom tool's grammar `format` changes only the output constraint (the tool's entry gains `grammar`);
  the reference (strict mode) ignores `format`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from recipe.codec import convert
from recipe.errors import RequestError
from recipe.protocols.leniency import custom_tool_parameters

from .conftest import STRICT, lenient_triggers
from .test_leniency import SETTINGS, body_of, outcome

CODEX_GRAMMAR = (Path(__file__).resolve().parents[1] / "constraints" / "data" / "codex_apply_patch.lark").read_text()
GRAMMARS = [{"type": "grammar", "syntax": "lark", "definition": CODEX_GRAMMAR},
            {"type": "grammar", "syntax": "regex", "definition": "[a-z]+( [a-z]+)*"}]


def with_tools(body: dict[str, Any], *tools: dict[str, Any]) -> dict[str, Any]:
    names = {t["name"] for t in tools}
    kept = [t for t in body.get("tools") or [] if t.get("name") not in names]
    return {**body, "tools": [*kept, *tools]}


def constraint_entries(body: dict[str, Any], options: Any) -> list[dict[str, Any]]:
    oc = convert("responses", copy.deepcopy(body), options).inference_options.output_constraint
    assert oc is not None and oc.kind.startswith("tool_call")
    return [e["function"] for e in json.loads(oc.schema)]


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), grammar=st.sampled_from([None, *GRAMMARS]), described=st.booleans())
@example(seed=533, grammar=GRAMMARS[0], described=False)  # a schema with "minimum": 0.00001 beside a grammar
def test_other_custom_tools_are_raw_text_tools(make_vectors: Any, seed: int, grammar: Any, described: bool) -> None:
    body = body_of(make_vectors, "responses", seed)
    custom: dict[str, Any] = {"type": "custom", "name": "run_sql"}
    if described:
        custom["description"] = "Runs one SQL statement."
    if grammar is not None:
        custom["format"] = grammar
    function: dict[str, Any] = {"type": "function", "name": "run_sql",
                                "parameters": custom_tool_parameters(
                                    None if grammar is None else {**grammar, "parameter": "input"})}
    if described:
        function["description"] = custom["description"]
    as_custom, as_function = with_tools(body, custom), with_tools(body, function)
    assert "custom tool" in lenient_triggers("responses", json.dumps(as_custom))
    ours, reference = outcome("responses", as_custom, None), outcome("responses", as_function, STRICT)
    oc = ours[1]["inference"]["output_constraint"] if ours[0] == "ok" else None
    if grammar is not None and oc is not None and oc["kind"].startswith("tool_call"):
        entries = json.loads(oc["schema"])
        carried = [e["function"].pop("grammar") for e in entries if e["function"]["name"] == "run_sql"]
        assert carried in ([], [{"syntax": grammar["syntax"], "definition": grammar["definition"], "parameter": "input"}])
        # Compared as JSON values: Python's json would re-serialise numbers differently (1e-05, the reference
        # 0.00001); the bytes are compared in the draws without a grammar.
        ref_oc = reference[1]["inference"]["output_constraint"] if reference[0] == "ok" else None
        assert ref_oc is not None and entries == json.loads(ref_oc["schema"])
        oc["schema"] = ref_oc["schema"]
    assert ours == reference
    strict = outcome("responses", as_custom, STRICT)
    assert strict == ("error", 400, "Unsupported custom tool: 'run_sql'. Only 'apply_patch' is supported.")


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), grammar=st.sampled_from(GRAMMARS))
def test_a_grammar_format_changes_only_the_constraint(make_vectors: Any, seed: int, grammar: dict[str, Any]) -> None:
    body = with_tools(body_of(make_vectors, "responses", seed), {"type": "custom", "name": "apply_patch"})
    shaped = copy.deepcopy(body)
    next(t for t in shaped["tools"] if t.get("name") == "apply_patch")["format"] = grammar
    assert "custom tool format" in lenient_triggers("responses", json.dumps(shaped))
    assert outcome("responses", shaped, STRICT) == outcome("responses", body, STRICT)  # the reference ignores it
    ours, plain = outcome("responses", shaped, None), outcome("responses", body, None)
    if ours[0] == "error" or not ours[1]["conversation"]["tools"]:
        assert ours == plain
        return
    assert ours[2] == plain[2]  # the same prompt
    assert ours[1]["conversation"] == plain[1]["conversation"]
    with_grammar = {e["name"]: e for e in constraint_entries(shaped, None)}
    without = {e["name"]: e for e in constraint_entries(body, None)}
    assert with_grammar.keys() == without.keys()
    for name, entry in with_grammar.items():
        carried = {"syntax": grammar["syntax"], "definition": grammar["definition"], "parameter": "input"}
        expected = {**without[name], "grammar": carried} if name == "apply_patch" else without[name]
        assert entry == expected


@pytest.mark.parametrize("fmt", [5, "grammar", {"type": "json"}, {"type": "grammar", "syntax": "ebnf", "definition": "x"},
                                 {"type": "grammar", "syntax": "lark"}, {"type": "grammar", "syntax": "lark", "definition": " "}])
def test_a_malformed_format_is_a_400_unless_strict(fmt: Any) -> None:
    body = {"model": "DeepSeek-V4-Pro", "input": "hi", "tools": [{"type": "custom", "name": "apply_patch", "format": fmt}]}
    with pytest.raises(RequestError, match=r"tools\[0\]\.format") as err:
        convert("responses", body)
    assert err.value.status == 400
    convert("responses", body, STRICT)  # the reference ignores `format`


@pytest.mark.parametrize("fmt", [None, {"type": "text"}])
def test_a_text_format_is_free_text_as_before(fmt: Any) -> None:
    tool: dict[str, Any] = {"type": "custom", "name": "apply_patch"}
    body = {"model": "DeepSeek-V4-Pro", "input": "hi", "tools": [{**tool, "format": fmt}]}
    assert constraint_entries(body, None) == constraint_entries({**body, "tools": [tool]}, STRICT)
    assert "grammar" not in constraint_entries(body, None)[0]


def test_a_forced_custom_tool_is_the_one_required_call() -> None:
    body = {"model": "DeepSeek-V4-Pro", "input": "hi", "tool_choice": {"type": "custom", "name": "apply_patch"},
            "tools": [{"type": "custom", "name": "apply_patch", "format": GRAMMARS[0]},
                      {"type": "function", "name": "f", "parameters": {"type": "object"}}]}
    req = convert("responses", body)
    assert req.conversation.tool_choice == "required" and [t.name for t in req.conversation.tools] == ["apply_patch"]
    assert req.inference_options.output_constraint is not None
    assert req.inference_options.output_constraint.kind == "tool_call_required"
    (entry,) = constraint_entries(body, None)
    assert entry["grammar"]["definition"] == CODEX_GRAMMAR
