"""`PromptBuilder.pieces` builds exactly what the same `special` / `template` calls one by one build."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.codecs.builder import PromptBuilder

_text = st.sampled_from(["", "a", "\n\n", "｜DSML｜", "<think>", "tool list", "é"])
_piece = st.tuples(st.booleans(), _text)
_op = st.one_of(
    st.tuples(st.just("special"), _text),
    st.tuples(st.just("template"), _text),
    st.tuples(st.just("text"), _text),
    st.tuples(st.just("repeated"), _text),
    st.tuples(st.just("pieces"), st.lists(_piece, max_size=6).map(tuple)),
)


def _run(ops: list[tuple[str, object]], batched: bool) -> PromptBuilder:
    b = PromptBuilder()
    for name, arg in ops:
        if name == "pieces" and not batched:
            for is_special, text in arg:  # type: ignore[attr-defined]
                (b.special if is_special else b.template)(text)
        else:
            getattr(b, name)(arg)
    return b


@settings(max_examples=400, deadline=None)
@given(st.lists(_op, max_size=12))
def test_pieces_equal_one_call_per_piece(ops: list[tuple[str, object]]) -> None:
    one, many = _run(ops, True), _run(ops, False)
    assert _whole(one) == _whole(many)
    assert one.position == many.position
    one.template("tail")
    many.template("tail")  # an open template span is joined the same way afterwards
    assert _whole(one) == _whole(many)


def _whole(b: PromptBuilder) -> tuple[object, ...]:
    r = b.build()
    return r.prompt, r.special_ranges, r.reusable_spans  # reusable_spans is not part of equality


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.just("text"), _text), max_size=4), st.lists(_text, max_size=8), _text)
def test_joined_equals_text_and_special_calls(before: list[tuple[str, str]], parts: list[str], special: str) -> None:
    one, many = _run(before, True), _run(before, True)
    one.joined(parts, special)
    for i, part in enumerate(parts):
        if i:
            many.special(special)
        many.text(part)
    assert _whole(one) == _whole(many)
    assert one.position == many.position
