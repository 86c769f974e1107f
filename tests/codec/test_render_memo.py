"""`render` then `encode` of one request renders once (`recipe.render_memo`), with the same results.

Proven against the off switch (`RenderMemo.enabled = False`: every call renders) on generated bodies of
the three APIs (random call ids, orders and spellings, both versions), and keyed by identity: a
conversation built where a dropped one lived (CPython reuses ids at once) is rendered afresh.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.codec import convert, encode, render
from recipe.conversation import Conversation, Message, ModelVersion
from recipe.encoding import encode_rendered_uncached
from recipe.errors import RequestError
from recipe.render_memo import RenderMemo
from recipe.tokenizer import load_deepseek_v4_tokenizer


@pytest.fixture
def memo_switch() -> Iterator[None]:
    yield
    RenderMemo.enabled = True


def _fields(rendered: Any) -> tuple[Any, ...]:
    return (rendered.prompt, rendered.special_ranges, rendered.image_sources, rendered.reusable_spans)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(api=st.sampled_from(["chat", "messages", "responses"]), seed=st.integers(0, 2**32))
def test_memo_equals_rendering_afresh(api: str, seed: int, make_vectors: Any, memo_switch: None) -> None:
    text = json.dumps(make_vectors.GENERATORS[api](random.Random(seed)), ensure_ascii=False)
    try:
        req = convert(api, text)
    except RequestError:
        return
    tokenizer = load_deepseek_v4_tokenizer()
    RenderMemo.enabled = True
    first = render(req)
    assert render(req) is first  # the second call is the memo's
    ids = encode(req, tokenizer) if req.model_version is ModelVersion.V4 else None
    other = ModelVersion.V41 if req.model_version is ModelVersion.V4 else ModelVersion.V4
    other_memo = render(req.conversation, other)  # the same object under the other version: its own entry
    RenderMemo.enabled = False
    fresh = render(req)
    assert fresh is not first
    assert _fields(first) == _fields(fresh)
    assert _fields(other_memo) == _fields(render(req.conversation, other))
    if ids is not None:
        assert ids == encode(req, tokenizer) == encode_rendered_uncached(fresh, tokenizer)


def test_memo_keys_on_the_object_not_its_address(memo_switch: None) -> None:
    """Conversations dropped after rendering free their ids for the next ones: each still gets its own prompt."""
    RenderMemo.enabled = True
    seen_ids: set[int] = set()
    reused = False
    for i in range(300):
        conv = Conversation(messages=(Message(role="user", content=f"question number {i}"),))
        reused = reused or id(conv) in seen_ids
        seen_ids.add(id(conv))
        assert f"question number {i}<" in render(conv, ModelVersion.V4).prompt
        del conv
    assert reused or len(seen_ids) <= RenderMemo.MAX_ENTRIES + 1  # ids did repeat, or the memo held them all


def test_memo_is_bounded(memo_switch: None) -> None:
    from recipe import codec

    RenderMemo.enabled = True
    convs = [Conversation(messages=(Message(role="user", content=str(i)),)) for i in range(3 * RenderMemo.MAX_ENTRIES)]
    for conv in convs:
        render(conv, ModelVersion.V4)
    assert len(codec._RENDERED._entries) <= RenderMemo.MAX_ENTRIES
