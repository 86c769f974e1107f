"""Closing within the budget (`recipe.constraints.closing`): a constrained output ends complete and valid inside
`max_tokens` whatever the sampler picks, and without a budget (or far from its end) the masks are unchanged.

The sampler here is an adversary: it never picks the end-of-sequence id while anything else is allowed, and
otherwise picks at random among the allowed ids (so it rambles inside strings and opens what it can). The oracle
is `jsonschema` on the arguments read back from the markup by a parser written here, not by the constraint code.

Objects are closed (`close_objects`, as `recipe serve` closes tool arguments by default): inside an open object
the search does not tell a missing required key from any other key, and may find no path (docs/clients.md).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from recipe.constraints import bitmask, compile_constraint
from recipe.constraints.backend import CompiledConstraint, Matcher
from recipe.constraints.closed_objects import close_objects
from recipe.constraints.closing import CHECKPOINT_STRIDE, CLOSING_MARGIN, BudgetCloser, closing_path

from .conftest import gpt2_style_tokenizer

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


@st.composite
def leaf_schemas(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["string", "integer", "number", "boolean", "enum", "array", "bounded"]))
    if kind == "enum":
        return {"enum": draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))}
    if kind == "array":
        return {"type": "array", "items": {"type": draw(st.sampled_from(["string", "integer"]))},
                "minItems": draw(st.integers(0, 2))}
    if kind == "bounded":
        return {"type": "string", "minLength": draw(st.integers(1, 4)), "maxLength": 40}
    return {"type": kind}


@st.composite
def object_schemas(draw: Any, depth: int = 0) -> dict[str, Any]:
    keys = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    props = {k: (draw(object_schemas(depth + 1)) if depth < 1 and draw(st.booleans()) else draw(leaf_schemas()))
             for k in keys}
    required = [k for k in keys if draw(st.booleans())]
    return {"type": "object", "properties": props, "required": required}


def walk(c: CompiledConstraint, budget: int | None, seed: int, steps: int) -> tuple[Matcher, list[np.ndarray]]:
    """The adversary's walk for at most `steps` tokens; returns the matcher and every mask it saw."""
    rng = random.Random(seed)
    m = (c.within_budget(budget) if budget is not None else c).matcher()
    eos = set(c.eos_token_ids)
    masks = []
    out = c.allocate_bitmask()
    while not m.is_terminated() and len(m.accepted_ids) < steps:
        m.fill_bitmask(out)
        masks.append(out.copy())
        ids = bitmask.allowed_ids(out, c.vocab_size)
        if not len(ids):
            break
        others = ids[~np.isin(ids, list(eos))]
        assert m.accept(int(others[rng.randrange(len(others))]) if len(others) else int(ids[0]))
    return m, masks


_DSML_CALL = re.compile(r'<｜DSML｜ ?invoke name="([^"]+)">\n(.*?)</｜DSML｜ ?invoke>', re.S)
_DSML_PARAM = re.compile(r'<｜DSML｜ ?parameter name="([^"]+)" string="(true|false)">(.*?)</｜DSML｜ ?parameter>', re.S)


def dsml_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for name, body in _DSML_CALL.findall(text):
        args = {k: (v if s == "true" else json.loads(v)) for k, s, v in _DSML_PARAM.findall(body)}
        calls.append((name, args))
    return calls


def outside_the_guarantee(c: CompiledConstraint, budget: int, ids: tuple[int, ...]) -> bool:
    """The documented exception (`recipe.constraints.closing`): at some checkpoint of this walk no path was
    found, or one stride's sampled tokens lengthened the path by more than the margin."""
    horizon = BudgetCloser(budget, c.start_closing_length()).horizon
    lengths = []
    for n in range(budget - horizon, len(ids) + 1, CHECKPOINT_STRIDE):
        m = c.matcher()
        assert m.accept_many(list(ids[:n])) == n
        if m.can_terminate():
            lengths.append(None)
            continue
        path = closing_path(m)
        if path is None:
            return True
        lengths.append(len(path))
    return any(a is not None and b is not None and b > a + CLOSING_MARGIN for a, b in itertools.pairwise(lengths))


def closed_or_excused(c: CompiledConstraint, budget: int, m: Matcher) -> bool:
    return m.is_terminated() or outside_the_guarantee(c, budget, m.accepted_ids)


def budget_that_fits(c: CompiledConstraint, extra: int) -> int:
    """A budget the closing path from the start fits in, plus `extra` tokens of room to ramble."""
    path = closing_path(c.matcher())
    assume(path is not None)  # the documented exception: the search gave up (MAX_NODES)
    assert path is not None
    return len(path) + CLOSING_MARGIN + extra


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=object_schemas(), fmt=st.sampled_from(["dsml_v4", "dsml_v41"]), extra=st.integers(0, 60),
       seed=st.integers(0, 2**32 - 1))
def test_forced_dsml_call_ends_complete_and_valid(tok, schema, fmt, extra, seed) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": close_objects(schema)}}]
    c = compile_constraint("tool_call", {"tools": tools, "required": True, "format": fmt, "single": True}, tok)
    budget = budget_that_fits(c, extra)
    m, _ = walk(c, budget, seed, budget)
    assert closed_or_excused(c, budget, m), f"not closed within {budget}: {m.text[-200:]!r}"
    assume(m.is_terminated())
    calls = dsml_calls(m.text.replace("｜DSML｜ calls", "｜DSML｜ tool_calls"))
    assert [n for n, _ in calls] == ["f"]
    jsonschema.validate(calls[0][1], schema)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=object_schemas(), extra=st.integers(0, 60), seed=st.integers(0, 2**32 - 1))
def test_json_schema_output_ends_complete_and_valid(tok, schema, extra, seed) -> None:
    c = compile_constraint("json_schema", close_objects(schema), tok)
    budget = budget_that_fits(c, extra)
    m, _ = walk(c, budget, seed, budget)
    assert closed_or_excused(c, budget, m), f"not closed within {budget}: {m.text[-200:]!r}"
    assume(m.is_terminated())
    jsonschema.validate(json.loads(m.text), schema)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=object_schemas(), extra=st.integers(0, 40), seed=st.integers(0, 2**32 - 1))
def test_chatml_call_with_a_byte_level_vocabulary(schema, extra, seed) -> None:
    small = gpt2_style_tokenizer(("<|endoftext|>", "<|im_end|>", "<tool_call>", "</tool_call>"))
    tools = [{"type": "function", "function": {"name": "f", "parameters": close_objects(schema)}}]
    c = compile_constraint("tool_call", {"tools": tools, "required": True, "format": "chatml", "single": True},
                           small)
    budget = budget_that_fits(c, extra)
    m, _ = walk(c, budget, seed, budget)
    assert closed_or_excused(c, budget, m), f"not closed within {budget}: {m.text[-200:]!r}"
    assume(m.is_terminated())
    body = m.text.split("<tool_call>", 1)[1].rsplit("</tool_call>", 1)[0]
    call = json.loads(body)
    assert call["name"] == "f"
    jsonschema.validate(call["arguments"], schema)


def test_thinking_is_closed_before_the_call(tok) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    c = compile_constraint("tool_call", {"tools": tools, "required": True, "thinking": True, "single": True}, tok)
    m, _ = walk(c, 80, seed=3, steps=80)
    assert m.is_terminated()
    assert "</think>" in m.text and dsml_calls(m.text)[0][0] == "f"


@pytest.mark.parametrize("budget", [None, 10_000])
def test_masks_far_from_the_budget_are_the_grammars(tok, budget) -> None:
    """The off switch (no budget) and a budget never near its end give the same masks as the bare grammar."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array"}}, "required": ["a"]}
    c = compile_constraint("json_schema", schema, tok)
    for seed in range(3):
        bare, bare_masks = walk(c, None, seed, 120)
        other, masks = walk(c, budget, seed, 120)
        assert other.accepted_ids == bare.accepted_ids
        assert all(np.array_equal(a, b) for a, b in zip(bare_masks, masks, strict=True))


def test_without_a_budget_the_adversary_is_cut(tok) -> None:
    """The negative control: the same walk with no budget runs past the limit without closing."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    c = compile_constraint("tool_call", {"tools": tools, "required": True, "single": True}, tok)
    bare, _ = walk(c, None, seed=1, steps=60)
    closed, _ = walk(c, 60, seed=1, steps=60)
    assert not bare.is_terminated() and closed.is_terminated()


def test_a_budget_below_the_shortest_call_is_left_alone(tok) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    c = compile_constraint("tool_call", {"tools": tools, "required": True, "single": True}, tok)
    m, _ = walk(c, 5, seed=0, steps=5)
    assert not m.is_terminated() and len(m.accepted_ids) == 5


def test_rollback_keeps_closing_exact(tok) -> None:
    """Speculative decoding rolls back: a matcher rolled back and replayed closes as one never rolled back."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    c = compile_constraint("json_schema", schema, tok).within_budget(40)
    straight, _ = walk(c, 40, seed=7, steps=40)
    ids = list(straight.accepted_ids)
    m = c.matcher()
    out = c.allocate_bitmask()
    for i, t in enumerate(ids):
        m.fill_bitmask(out)
        assert bitmask.is_allowed(out, t)
        assert m.accept(t)
        if i % 5 == 4:
            m.rollback(2)
            assert m.accept_many(ids[i - 1:i + 1]) == 2
    assert m.is_terminated() and m.accepted_ids == straight.accepted_ids
