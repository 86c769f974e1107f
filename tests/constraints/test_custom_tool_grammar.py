"""Responses custom tools with a grammar: the client's Lark (or regex) grammar embedded in the tool-call
constraint, checked against the `lark` package parsing the same grammar (an oracle that is not the mask).

The grammar is the one Codex 0.169.0 sends for `apply_patch` (`data/codex_apply_patch.lark`, read out of
the installed client's binary and equal to the `format.definition` it sends, captured from `codex exec -m gpt-5.5`;
Codex's `environment_id` variant is derived from it as Codex derives it).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.constraints import ConstraintError, compile_constraint
from recipe.constraints.custom_tool_grammar import ToolGrammar, as_regex, embed
from recipe.constraints.instance_check import walk_ids

lark = pytest.importorskip("lark", reason="the lark package (dev extra) is the oracle of these tests")

CODEX_GRAMMAR = (Path(__file__).parent / "data" / "codex_apply_patch.lark").read_text(encoding="utf-8")
ENVIRONMENT_GRAMMAR = CODEX_GRAMMAR.replace(
    "start: begin_patch hunk+ end_patch", "start: begin_patch environment_id? hunk+ end_patch", 1
) + 'environment_id: "*** Environment ID: " filename LF\n'
PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"],
              "additionalProperties": False}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])


def tools(definition: str, syntax: str = "lark", name: str = "apply_patch") -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": name, "parameters": PARAMETERS,
                                              "grammar": {"syntax": syntax, "definition": definition}}},
            {"type": "function", "function": {"name": "ping", "parameters": None}}]


def call(fmt: str, text: str, name: str = "apply_patch") -> str:
    """One required call of `name` with `text` as its input, spelled in `fmt`."""
    if fmt == "chatml":
        return "<tool_call>" + json.dumps({"name": name, "arguments": {"input": text}}, ensure_ascii=False,
                                          separators=(",", ":")) + "</tool_call>"
    sp, block = (" ", "calls") if fmt == "dsml_v41" else ("", "tool_calls")
    return (f'<｜DSML｜{sp}invoke name="{name}">\n<｜DSML｜{sp}parameter name="input" string="true">{text}'
            f"</｜DSML｜{sp}parameter>\n</｜DSML｜{sp}invoke>\n</｜DSML｜{sp}{block}>")


@lru_cache(maxsize=4)
def compiled(tok: Any, fmt: str, definition: str = CODEX_GRAMMAR, syntax: str = "lark") -> Any:
    return compile_constraint("tool_call", {"tools": tools(definition, syntax), "required": True, "format": fmt},
                              tok, strict=False, cache=None)


@lru_cache(maxsize=4)
def oracle(definition: str) -> Any:
    """Lark's Earley parser on the grammar. Its dynamic lexer refuses zero-width regexes, so `/(.*)/` is
    read as the same language spelled `/(.+)/?` (the only rewrite)."""
    return lark.Lark(definition.replace("/(.*)/", "/(.+)/?"), parser="earley", lexer="dynamic")


def lark_accepts(definition: str, text: str) -> bool:
    try:
        oracle(definition).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def mask_accepts(tok: Any, fmt: str, text: str, definition: str = CODEX_GRAMMAR) -> bool:
    walk = walk_ids(compiled(tok, fmt, definition), tok.full.encode(call(fmt, text), add_special_tokens=False).ids)
    assert walk.unsound_steps == 0
    return walk.accepted


# ---- random valid patches ----------------------------------------------------------------------------

LINE_CHARS = st.characters(blacklist_characters="\n\r｜", blacklist_categories=("Cs", "Cc"))
line_text = st.text(LINE_CHARS, max_size=12)
filename = st.text(st.sampled_from("abcxyz019_-./ é中"), min_size=1, max_size=10)


@st.composite
def hunk(draw: Any) -> str:
    kind = draw(st.sampled_from(["add", "delete", "update"]))
    name = draw(filename)
    if kind == "add":
        return f"*** Add File: {name}\n" + "".join(f"+{t}\n" for t in draw(st.lists(line_text, min_size=1, max_size=4)))
    if kind == "delete":
        return f"*** Delete File: {name}\n"
    out = f"*** Update File: {name}\n"
    if draw(st.booleans()):
        out += f"*** Move to: {draw(filename)}\n"
    if draw(st.booleans()):
        for _ in range(draw(st.integers(1, 5))):
            if draw(st.integers(0, 3)) == 0:
                ctx = draw(st.text(LINE_CHARS, min_size=1, max_size=10))
                out += draw(st.sampled_from(["@@\n", f"@@ {ctx}\n"]))
            else:
                out += draw(st.sampled_from("+- ")) + draw(line_text) + "\n"
        if draw(st.booleans()):
            out += "*** End of File\n"
    return out


@st.composite
def patch(draw: Any) -> str:
    body = "".join(draw(st.lists(hunk(), min_size=1, max_size=3)))
    return "*** Begin Patch\n" + body + "*** End Patch" + draw(st.sampled_from(["\n", ""]))


MUTATION_CHARS = "+- @*\nabEPF:/"


@st.composite
def mutated(draw: Any) -> str:
    text = draw(patch())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "drop_line", "dup_line", "swap_lines"]))
        lines = text.split("\n")
        if op in ("drop_line", "dup_line", "swap_lines") and len(lines) > 1:
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if op == "drop_line":
                del lines[i]
            elif op == "dup_line":
                lines.insert(i, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
            continue
        pos = draw(st.integers(0, max(len(text) - 1, 0)))
        ch = draw(st.sampled_from(MUTATION_CHARS))
        if op == "insert":
            text = text[:pos] + ch + text[pos:]
        elif op == "delete" and text:
            text = text[:pos] + text[pos + 1 :]
        elif text:
            text = text[:pos] + ch + text[pos + 1 :]
    return text


# ---- tests -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["dsml_v4", "dsml_v41", "chatml"])
@pytest.mark.parametrize("definition", [CODEX_GRAMMAR, ENVIRONMENT_GRAMMAR], ids=["codex", "environment_id"])
def test_the_codex_grammar_compiles_and_holds_the_call_to_it(tok: Any, fmt: str, definition: str) -> None:
    good = "*** Begin Patch\n*** Update File: src/a.py\n@@ def f():\n-    return 1\n+    return 2\n*** End Patch\n"
    assert lark_accepts(definition, good)
    assert mask_accepts(tok, fmt, good, definition)
    for bad in [good.replace("*** End Patch\n", ""), good.replace("-    return 1", "~    return 1"),
                "*** Begin Patch\n*** End Patch\n", good.replace("*** Update File: src/a.py\n", "")]:
        assert not lark_accepts(definition, bad)
        assert not mask_accepts(tok, fmt, bad, definition), bad
    if definition is ENVIRONMENT_GRAMMAR:
        env = good.replace("Patch\n*** Update", "Patch\n*** Environment ID: e1\n*** Update", 1)
        assert mask_accepts(tok, fmt, env, definition)
        assert not mask_accepts(tok, fmt, env, CODEX_GRAMMAR)


@SETTINGS
@given(text=patch(), fmt=st.sampled_from(["dsml_v4", "chatml"]))
def test_random_valid_patches_pass_the_mask_token_by_token(tok: Any, text: str, fmt: str) -> None:
    assert lark_accepts(CODEX_GRAMMAR, text)  # the generator draws from the grammar
    assert mask_accepts(tok, fmt, text)


@SETTINGS
@given(text=mutated(), fmt=st.sampled_from(["dsml_v4", "chatml"]))
def test_the_mask_agrees_with_lark_on_mutated_patches(tok: Any, text: str, fmt: str) -> None:
    assert mask_accepts(tok, fmt, text) == lark_accepts(CODEX_GRAMMAR, text), text


def test_the_dsml_marker_cannot_be_spelled_inside_the_input(tok: Any) -> None:
    # Valid for the client's grammar, but the DSML marker (or a lexeme ending inside it) would end the
    # parameter early for the output parser, so the embedded grammar refuses it.
    for line in ["+a｜DSML｜b\n", "+x｜DS\n", "+x｜\n"]:
        text = f"*** Begin Patch\n*** Add File: a\n{line}*** End Patch\n"
        assert lark_accepts(CODEX_GRAMMAR, text)
        assert not mask_accepts(tok, "dsml_v4", text), line
    for line in ["+x｜y DSML\n", "+x DSML｜ y\n"]:  # the marker's characters elsewhere are fine
        assert mask_accepts(tok, "dsml_v4", f"*** Begin Patch\n*** Add File: a\n{line}*** End Patch\n"), line


def test_auto_choice_free_text_then_a_constrained_call(tok: Any) -> None:
    c = compile_constraint("tool_call", {"tools": tools(CODEX_GRAMMAR), "format": "dsml_v4"}, tok, strict=False,
                           cache=None)
    good = "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n"
    opened = "I will delete it.\n\n<｜DSML｜tool_calls>\n"
    for text, ok in [(opened + call("dsml_v4", good), True), (opened + call("dsml_v4", good[:-14]), False),
                     ("Just text.", True)]:
        assert walk_ids(c, tok.full.encode(text, add_special_tokens=False).ids).accepted is ok


@pytest.mark.parametrize("fmt", ["dsml_v4", "chatml"])
def test_a_regex_grammar_constrains_the_input(tok: Any, fmt: str) -> None:
    c = compile_constraint("tool_call", {"tools": tools(r"[0-9]+(\.[0-9]+)? (cm|m)", "regex"), "required": True,
                                         "format": fmt}, tok, strict=False, cache=None)
    for text, ok in [("12 cm", True), ("1.5 m", True), ("12cm", False), ("x m", False), ("1/2 m", False)]:
        ids = tok.full.encode(call(fmt, text), add_special_tokens=False).ids
        assert walk_ids(c, ids).accepted is ok, text


def test_common_imports_aliases_and_repetitions_embed(tok: Any) -> None:
    definition = ('start: item ("," item)~0..2 -> items\n?item: NUMBER | WORD\n| "<" CNAME ">"\n'
                  '%import common (NUMBER, WORD)\n%import common.CNAME\n')
    c = compile_constraint("tool_call", {"tools": tools(definition), "required": True, "format": "dsml_v4"}, tok,
                           strict=False, cache=None)
    for text in ["12", "ab,3.5", "a,b,<c_1>", "a,b,c,d", "a,", "<1>"]:
        ids = tok.full.encode(call("dsml_v4", text), add_special_tokens=False).ids
        assert walk_ids(c, ids).accepted is lark_accepts(definition, text), text


def test_two_grammars_and_a_shared_import_live_side_by_side(tok: Any) -> None:
    listed = tools("start: A LF\nA: /[a-z]+/\n%import common.LF\n", name="one")[:1] + tools(
        'start: "x" LF A\nA: "y"\n%import common.LF\n', name="two")[:1]
    c = compile_constraint("tool_call", {"tools": listed, "required": True, "format": "dsml_v4"}, tok,
                           strict=False, cache=None)
    for name, text, ok in [("one", "abc\n", True), ("one", "x\ny", False), ("two", "x\ny", True), ("two", "abc\n", False)]:
        ids = tok.full.encode(call("dsml_v4", text, name), add_special_tokens=False).ids
        assert walk_ids(c, ids).accepted is ok, (name, text)


@pytest.mark.parametrize(("definition", "named"), [
    ('start: "a"\n%ignore " "\n', "%ignore"),
    ('start: a\na.2: "x"\n', "priority"),
    ("start: A\nA: /a/\n%import python.NAME\n", "only `common`"),
    ('start: x{"a"}\n', "template"),
    ('start: %json {"type": "integer"}\n', "%json"),
    ("start: <[1]>\n", "special token"),
    ('start: "a"\n%declare B\n', "%declare"),
    ('x: "a"\n', "no `start` rule"),
    ("start: b\n", "b is used in start but never defined"),
    ("start: /a(?=b)/\n", "refused by llguidance"),
    ("start: NOPE\n%import common.NOPE\n", "refused by llguidance"),
])
def test_grammars_that_cannot_be_embedded_are_refused_by_name(tok: Any, definition: str, named: str) -> None:
    with pytest.raises(ConstraintError, match=named.replace("(", r"\(").replace("`", ".")):
        compile_constraint("tool_call", {"tools": tools(definition), "required": True}, tok, strict=False,
                           cache=None)


def test_a_recursive_grammar_embeds_in_dsml_but_not_as_a_chatml_string(tok: Any) -> None:
    definition = 'start: "(" start? ")"\n'
    c = compile_constraint("tool_call", {"tools": tools(definition), "required": True, "format": "dsml_v4"}, tok,
                           strict=False, cache=None)
    for text, ok in [("(())", True), ("(()", False)]:
        assert walk_ids(c, tok.full.encode(call("dsml_v4", text), add_special_tokens=False).ids).accepted is ok
    with pytest.raises(ConstraintError, match="refers to itself"):
        compile_constraint("tool_call", {"tools": tools(definition), "required": True, "format": "chatml"}, tok,
                           strict=False, cache=None)


def test_embedding_renames_everything_into_the_namespace() -> None:
    e = embed(ToolGrammar("lark", CODEX_GRAMMAR), "g7", "｜DSML｜")
    assert e.start == "g7_start" and e.imports == {"LF"}
    defined = [line.split(":", 1)[0].lstrip("?!") for line in e.definitions]
    assert all(name.startswith(("g7_", "G7_")) for name in defined)
    assert as_regex(ToolGrammar("regex", "a|b")) == "^(?:a|b)$"
