"""The matcher contract: EOS exactly when terminable, rejection leaves state, rollback, text, mask hygiene."""

from __future__ import annotations

import numpy as np
import pytest

from recipe.constraints import ConstraintError, compile_constraint
from recipe.constraints import bitmask as bm
from recipe.constraints.instance_check import check_text, check_value

EOS = 1


def test_eos_allowed_exactly_when_terminable(tok) -> None:
    c = compile_constraint("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}},
                                           "required": ["a"]}, tok)
    assert c.eos_token_ids == (EOS,)
    m = c.matcher()
    mask = c.allocate_bitmask()
    ids = tok.encode_plain('{"a":12}')
    for t in ids:
        m.fill_bitmask(mask)
        assert bm.is_allowed(mask, EOS) == m.can_terminate() is False
        assert m.accept(t)
    m.fill_bitmask(mask)
    assert m.can_terminate() and bm.is_allowed(mask, EOS)
    assert m.accept(EOS) and m.is_terminated()
    m.fill_bitmask(mask)
    assert bm.allowed_ids(mask, c.vocab_size).tolist() == [EOS]
    assert m.text == '{"a":12}'
    assert not m.accept(ids[0])


def test_rejected_token_leaves_state_and_rollback_restores(tok) -> None:
    c = compile_constraint("regex", r"ab[0-9]+", tok)
    m = c.matcher()
    a, b = tok.encode_plain("a")[0], tok.encode_plain("b")[0]
    assert m.accept(a)
    assert not m.accept(a)  # refused, state unchanged
    assert m.accept(b)
    digits = tok.encode_plain("7")
    assert m.accept(digits[0]) and m.can_terminate()
    assert m.accept(EOS) and m.is_terminated()
    m.rollback(2)  # EOS and the digit
    assert not m.is_terminated() and not m.can_terminate()
    assert m.text == "ab"
    with pytest.raises(ConstraintError):
        m.rollback(5)


def test_added_tokens_never_allowed_inside_json_strings(tok) -> None:
    c = compile_constraint("json_schema", {"type": "string"}, tok)
    m = c.matcher()
    assert m.accept(tok.encode_plain('"')[0])
    mask = c.allocate_bitmask()
    m.fill_bitmask(mask)
    allowed = bm.to_bool(mask, c.vocab_size)
    special = np.array(sorted(tok.added_ids.values()))
    assert not allowed[special].any()  # BOS, EOS, PAD, <think>, ｜DSML｜, placeholders
    assert allowed.sum() > 120_000  # but nearly every text token is
    assert mask.shape == (4040,)


def test_mask_into_wider_buffer_zeroes_the_tail(tok) -> None:
    c = compile_constraint("json_object", None, tok)
    wide = np.full(4100, -1, dtype=np.int32)
    c.matcher().fill_bitmask(wide)
    assert (wide[4040:] == 0).all()
    with pytest.raises(ConstraintError):
        c.matcher().fill_bitmask(np.zeros(10, dtype=np.int32))


@pytest.mark.parametrize(
    ("kind", "spec", "text", "ok"),
    [
        ("json_schema", {"type": "number"}, "0.5", True),  # outlines-core 0.2.14 rejects this
        ("regex", r"[0-9]+(\.[0-9]+)?", "12.5", True),
        ("regex", "a|abc", "abc", True),
        ("json_schema", {"type": "object", "properties": {"foo": {}}, "required": ["foo"]}, '{"foo":1}', True),
        ("json_schema", {"type": "object", "properties": {"foo": {}}, "required": ["foo"]}, "42", False),
        ("json_schema", {"enum": [{"a.b": 1}]}, '{"aXb":1}', False),
        ("json_schema", {"enum": [{"a.b": 1}]}, '{"a.b":1}', True),
    ],
)
def test_outlines_core_bug_reproductions_are_handled(tok, kind, spec, text, ok) -> None:
    assert check_text(compile_constraint(kind, spec, tok, strict=False), text, tok).accepted is ok


def test_bitmask_numpy_and_torch_agree(tok) -> None:
    torch = pytest.importorskip("torch")
    c = compile_constraint("json_schema", {"type": "integer"}, tok)
    mask = c.allocate_bitmask()
    c.matcher().fill_bitmask(mask)
    logits = np.random.default_rng(0).standard_normal(c.vocab_size).astype(np.float32)
    want = bm.apply_to_logits(logits.copy(), mask)
    got = bm.apply_to_logits_torch(torch.from_numpy(logits.copy()), mask).numpy()
    assert np.array_equal(np.isneginf(want), np.isneginf(got))
    assert np.array_equal(np.isneginf(want), ~bm.to_bool(mask, c.vocab_size))
    ids = bm.allowed_ids(mask, c.vocab_size)
    assert all(tok.decode([int(i)]).strip().lstrip("-").isdigit() or tok.decode([int(i)]) in ("-",) for i in ids)


@pytest.mark.parametrize("backend", ["llguidance", "xgrammar", "outlines"])
def test_every_backend_walks_the_same_instances(tok, backend) -> None:
    if backend == "xgrammar":
        pytest.importorskip("xgrammar")
    c = compile_constraint("regex", r"[a-z]{2,4}-[0-9]{2}", tok, backend=backend, strict=False)
    for text, ok in [("ab-12", True), ("abcd-99", True), ("a-12", False), ("abcde-12", False), ("ab-1", False)]:
        assert check_text(c, text, tok).accepted is ok, (backend, text)
    m = c.matcher()
    ids = tok.encode_plain("ab-12")
    assert m.accept_many(ids) == len(ids)
    m.rollback(len(ids))
    assert m.text == "" and m.accept_many(ids) == len(ids) and m.can_terminate()


def test_json_schema_backends_agree_on_a_typed_schema(tok) -> None:
    pytest.importorskip("xgrammar")
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 5},
                                               "s": {"type": "string", "maxLength": 3}},
              "required": ["n", "s"], "additionalProperties": False}
    cases = [({"n": 3, "s": "ab"}, True), ({"n": 6, "s": "ab"}, False), ({"n": 4, "s": "abcd"}, False)]
    for backend in ("llguidance", "xgrammar"):
        c = compile_constraint("json_schema", schema, tok, backend=backend, strict=False)
        for value, ok in cases:
            assert check_value(c, value, tok).accepted is ok, (backend, value)


def test_other_byte_level_tokenizer(small_tok) -> None:
    c = compile_constraint("json_schema", {"type": "object", "properties": {"t": {"type": "boolean"}},
                                           "required": ["t"]}, small_tok)
    assert c.eos_token_ids == (small_tok.added_ids["<|im_end|>"],)  # ChatML's turn end is preferred
    assert check_text(c, '{"t":true}', small_tok).accepted
    assert not check_text(c, '{"t":1}', small_tok).accepted
    stop = small_tok.added_ids["<|endoftext|>"]
    c2 = compile_constraint("regex", "x+", small_tok, eos_token_ids=(stop,))
    m = c2.matcher()
    assert not m.accept(stop)
    assert m.accept(small_tok.encode_plain("x")[0]) and m.accept(stop) and m.is_terminated()


def test_contains_is_enforced_by_a_counted_array_grammar(tok) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}, "minContains": 2,
              "maxContains": 3}
    c = compile_constraint("json_schema", schema, tok, strict=True)
    assert c.report is not None and c.report.enforced_exactly and "lark" in c.extra
    for value, ok in [([1, 1], True), ([0, 1, 2, 1, 1], True), ([1], False), ([1, 1, 1, 1], False),
                      ([1, 1, "x"], False), ([], False)]:
        assert check_value(c, value, tok).accepted is ok, value


def test_from_output_constraint_kinds(tok) -> None:
    from recipe.constraints import from_output_constraint
    from recipe.conversation import OutputConstraint

    obj = from_output_constraint(OutputConstraint("json", ""), tok)  # response_format json_object
    assert obj.kind == "json_object"
    assert check_text(obj, '{"a":[1,{"b":null}]}', tok).accepted and not check_text(obj, "[1]", tok).accepted
    sch = from_output_constraint(OutputConstraint("json", '{"type":"array","uniqueItems":true}'), tok)
    assert sch.report is not None and sch.report.post == ("uniqueItems",)  # non-strict: post-checked
    assert sch.validate("[1,1]") and not sch.validate("[1,2]")
    rx = from_output_constraint(OutputConstraint("regex", "(yes|no)"), tok)
    assert check_text(rx, "yes", tok).accepted and not check_text(rx, "maybe", tok).accepted
    with pytest.raises(ConstraintError):
        from_output_constraint(OutputConstraint("bogus", ""), tok)  # type: ignore[arg-type]


def test_grammar_kind_on_both_grammar_backends(tok) -> None:
    lark = compile_constraint("grammar", 'start: "(" NUM ("," NUM)* ")"\nNUM: /[0-9]+/\n', tok)
    assert check_text(lark, "(1,22,333)", tok).accepted and not check_text(lark, "(1,)", tok).accepted
    pytest.importorskip("xgrammar")
    ebnf = compile_constraint("grammar", 'root ::= "(" num ("," num)* ")"\nnum ::= [0-9]+', tok,
                              backend="xgrammar", strict=False)
    assert check_text(ebnf, "(1,22,333)", tok).accepted and not check_text(ebnf, "(1,)", tok).accepted


def test_matchers_on_many_threads_share_one_compiled_constraint(tok) -> None:
    from concurrent.futures import ThreadPoolExecutor

    c = compile_constraint("json_schema", {"type": "array", "items": {"type": "integer"}, "maxItems": 3}, tok)
    texts = ["[1,2,3]", "[1,2,3,4]", "[]", '["x"]'] * 8
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda t: check_text(c, t, tok).accepted, texts))
    assert got == [True, False, True, False] * 8


def test_batched_fill_equals_one_by_one(tok) -> None:
    from recipe.constraints.batch import fill_bitmasks

    schemas = [{"type": "integer"}, {"type": "object", "properties": {"a": {"type": "string"}}}, {"enum": ["x", 1]}]
    cs = [compile_constraint("json_schema", s, tok) for s in schemas] + [compile_constraint("regex", "ab+", tok)]
    ms = [c.matcher() for c in cs]
    prefixes = ["12", '{"a":"q', '"x"', "abb"]
    for m, p in zip(ms, prefixes, strict=True):
        assert m.accept_many(tok.encode_plain(p)) == len(tok.encode_plain(p))
    assert ms[2].accept(1)  # terminated row
    batch = np.zeros((6, 4040), dtype=np.int32)
    fill_bitmasks([*ms, None], batch)
    for i, m in enumerate(ms):
        one = np.zeros(4040, dtype=np.int32)
        m.fill_bitmask(one)
        assert np.array_equal(batch[i], one), i
    assert (batch[4] == -1).all() and (batch[5] == 0).all()


def test_overlapping_pattern_properties_become_disjoint_key_regions(tok) -> None:
    schema = {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"maximum": 20}},
              "additionalProperties": False}
    c = compile_constraint("json_schema", schema, tok, strict=True)  # llguidance alone refuses: not disjoint
    assert c.report is not None and c.report.enforced_exactly and "lark" in c.extra
    for value, ok in [({"a1": 5}, True), ({"ab": 15}, True), ({"ab": 25}, False), ({"ab": 1.5}, False),
                      ({"xb": 30}, False), ({"xb": "s"}, True), ({"zz": 1}, False), ({}, True)]:
        assert check_value(c, value, tok).accepted is ok, value
