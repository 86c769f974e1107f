"""Tool-call constraints: DSML (V4, V4.1) and ChatML markup with arguments constrained by each tool's schema.

The accepted texts are the reference codec's own renderings of tool calls (codec-spec.md §2.5, E10).
"""

from __future__ import annotations

import pytest

from recipe.constraints import ConstraintError, compile_constraint, from_output_constraint
from recipe.constraints.instance_check import walk_ids
from recipe.conversation import OutputConstraint

from .conftest import gpt2_style_tokenizer

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
                                         "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": None}},
]
# the reference's rendering of one call (history form, §2.5), after the required-choice opener
V4_CALL = ('<｜DSML｜invoke name="get_weather">\n'
           '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
           '</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
V41_CALL = V4_CALL.replace("｜DSML｜", "｜DSML｜ ").replace("｜DSML｜ tool_calls", "｜DSML｜ calls")


def accepted(c, tok, text: str) -> bool:
    return walk_ids(c, tok.full.encode(text, add_special_tokens=False).ids).accepted


def test_required_dsml_v4_accepts_reference_rendering(tok) -> None:
    c = compile_constraint("tool_call", {"tools": TOOLS, "required": True}, tok)
    assert accepted(c, tok, V4_CALL)
    two = V4_CALL.replace("</｜DSML｜tool_calls>", '<｜DSML｜invoke name="ping">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    assert accepted(c, tok, two)
    full = ('<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="city" string="true">New "York"\nNY</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="unit" string="true">f</｜DSML｜parameter>\n'
            '</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    assert accepted(c, tok, full)
    for bad in [
        V4_CALL.replace("get_weather", "get_time"),  # unknown tool
        V4_CALL.replace('name="city" string="true">Paris', 'name="town" string="true">Paris'),  # unknown param
        full.replace('string="false">3<', 'string="false">0<'),  # minimum 1
        full.replace('string="false">3<', 'string="true">3<'),  # integer given as raw text
        full.replace('string="true">f<', 'string="true">k<'),  # enum
        '<｜DSML｜invoke name="get_weather">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',  # required city missing
        "Sure!" + V4_CALL,  # required: no free text
    ]:
        assert not accepted(c, tok, bad), bad


def test_required_dsml_v41_spelling(tok) -> None:
    c = compile_constraint("tool_call", {"tools": TOOLS, "required": True, "format": "dsml_v41"}, tok)
    assert accepted(c, tok, V41_CALL)
    assert not accepted(c, tok, V4_CALL)


def test_auto_allows_text_then_one_block(tok) -> None:
    c = compile_constraint("tool_call", {"tools": TOOLS}, tok)
    assert accepted(c, tok, "The weather is nice.")
    assert accepted(c, tok, "Let me check.\n\n<｜DSML｜tool_calls>\n" + V4_CALL)
    assert not accepted(c, tok, "Let me check.\n\n<｜DSML｜tool_calls>\n" + V4_CALL + "more text")
    assert not accepted(c, tok, "I spell ｜DSML｜ as text")  # the parser would take it for markup


def test_thinking_prefix(tok) -> None:
    c = compile_constraint("tool_call", {"tools": TOOLS, "thinking": True}, tok)
    assert accepted(c, tok, "Need the tool.</think>\n\n<｜DSML｜tool_calls>\n" + V4_CALL)
    assert not accepted(c, tok, "\n\n<｜DSML｜tool_calls>\n" + V4_CALL)


def test_named_tool_via_output_constraint(tok) -> None:
    import json

    oc = OutputConstraint("tool_call_required", json.dumps([TOOLS[1]], separators=(",", ":")))
    c = from_output_constraint(oc, tok)
    assert accepted(c, tok, '<｜DSML｜invoke name="ping">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    assert not accepted(c, tok, V4_CALL)


def test_chatml_tool_calls_with_text_tokens() -> None:
    small = gpt2_style_tokenizer()
    c = compile_constraint("tool_call", {"tools": TOOLS, "required": True}, small)
    ok = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
    assert walk_ids(c, small.encode_plain(ok)).accepted
    bad = ok.replace('"days": 2', '"days": "2"')
    assert not walk_ids(c, small.encode_plain(bad)).accepted
    auto = compile_constraint("tool_call", {"tools": TOOLS}, small)
    assert walk_ids(auto, small.encode_plain("Checking. " + ok)).accepted
    assert walk_ids(auto, small.encode_plain("no call")).accepted


def test_chatml_tool_call_tags_as_added_tokens() -> None:
    small = gpt2_style_tokenizer(("<|endoftext|>", "<|im_end|>", "<tool_call>", "</tool_call>"))
    c = compile_constraint("tool_call", {"tools": TOOLS}, small)
    ok = 'Checking.<tool_call>{"name": "ping", "arguments": {}}</tool_call>'
    assert walk_ids(c, small.full.encode(ok, add_special_tokens=False).ids).accepted
    assert not walk_ids(c, small.encode_plain(ok)).accepted  # tags spelled as text are not the tags


def test_bad_tool_lists(tok) -> None:
    for spec, pat in [([], "non-empty"), ([{"type": "function", "function": {"name": "a b"}}], "invalid function name"),
                      ([{"name": "f"}, {"name": "f"}], "unique"), ("[", "not valid JSON")]:
        with pytest.raises(ConstraintError, match=pat):
            compile_constraint("tool_call", {"tools": spec} if not isinstance(spec, str) else spec, tok)


def test_single_call_ends_the_output_after_one_call(tok) -> None:
    two = V4_CALL.replace("</｜DSML｜tool_calls>", '<｜DSML｜invoke name="ping">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    single = compile_constraint("tool_call", {"tools": TOOLS, "required": True, "single": True}, tok)
    assert accepted(single, tok, V4_CALL)
    assert not accepted(single, tok, two)
    assert accepted(compile_constraint("tool_call", {"tools": TOOLS, "required": True}, tok), tok, two)
    small = gpt2_style_tokenizer()
    call = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
    for required in (True, False):
        c = compile_constraint("tool_call", {"tools": TOOLS, "required": required, "single": True}, small)
        assert walk_ids(c, small.encode_plain(call)).accepted
        assert not walk_ids(c, small.encode_plain(call + "\n" + call)).accepted
    many = compile_constraint("tool_call", {"tools": TOOLS, "required": True}, small)
    assert walk_ids(many, small.encode_plain(call + "\n" + call)).accepted
