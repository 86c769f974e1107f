"""Codec test helpers: the official reference as oracle and random conversation generators."""

from __future__ import annotations

import deepseek_recipe as dr
from hypothesis import strategies as st

from recipe.conversation import Conversation, ImageSource, Message, ToolCall, ToolDefinition

SPECIAL_SPELLINGS = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜System｜>",
    "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜", "<｜image｜>", "<｜ref｜>", "<｜/ref｜>",
    "<｜box｜>", "<｜/box｜>", "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>",
    "<tool_result>", "</tool_result>", "<｜DSML｜tool_calls>", "<im_start>", "<|im_end|>",
]  # fmt: skip

_FRAGMENTS = [
    " ", "  ", "\n", "\n\n", "\t", "a", "Hello", " world", "x", "Q", "123", "4567", "3.14", "你好", "世界",
    "こんにちは", "ｶﾀｶﾅ", "😀", "é", "\u200b", "\u00a0", "\u2028", "مرحبا", "{", "}", '"', "\\", ":", ",",
    ".", "!", "?", "-", "#", "## ", "`", "'s", "<", ">", "/", "<b>", "def f(x):\n    return x**2\n",
]  # fmt: skip

texts = st.lists(st.sampled_from(_FRAGMENTS + SPECIAL_SPELLINGS), max_size=12).map("".join)
short_names = st.sampled_from(["f", "get_weather", "search", "a_b", "Tool-1", "名前"])

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e-5, 1.5e-5, 1e-6, 1.5e-7, 1e16, 1e20, 1e15, -0.0, 2.0, 5e-324, 0.1, 123.456]),
    texts,
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["type", "k", "x", "é", "a b", ""]), inner, max_size=4),
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(
    st.sampled_from(["type", "properties", "city", "n", "q", "é"]), json_values, max_size=5
)

tools = st.builds(
    ToolDefinition,
    name=short_names,
    description=st.one_of(st.none(), texts),
    parameters=st.one_of(st.none(), json_objects),
    defer_loading=st.booleans().map(lambda b: b and False),
)

images = st.builds(
    ImageSource,
    kind=st.just("url"),
    url=st.sampled_from(["https://example.com/a.png", "https://example.com/b.jpg"]),
    detail=st.sampled_from(["low", "high", "auto"]),
)

_arguments = st.one_of(
    json_objects.map(lambda o: __import__("json").dumps(o)),
    st.sampled_from(["", "[1]", "not json", '{"a": NaN}', '{"a": 1e400}', "{}", '{"s": "v\\n"}', "1"]),
)


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    """Random conversations of the shapes request conversion produces, plus direct-construction extras."""
    msgs: list[Message] = []
    for _ in range(draw(st.integers(0, 7))):
        kind = draw(st.sampled_from(["user", "user", "system", "assistant", "calls", "reminder", "tool"]))
        if kind == "user":
            msgs.append(Message("user", draw(texts), image_sources=tuple(draw(st.lists(images, max_size=2)))))
        elif kind == "system":
            sys_tools = draw(st.one_of(st.none(), st.lists(tools, max_size=2).map(tuple)))
            msgs.append(
                Message(
                    "system",
                    draw(texts),
                    image_sources=tuple(draw(st.lists(images, max_size=1))),
                    tools=sys_tools,
                )
            )
        elif kind == "reminder":
            msgs.append(Message("latest_reminder", draw(texts)))
        elif kind == "assistant":
            # Direct construction only: an empty call list, a prefix flag on a non-final turn.
            msgs.append(
                Message(
                    "assistant",
                    draw(texts),
                    reasoning_content=draw(st.one_of(st.none(), texts)),
                    tool_calls=draw(st.sampled_from([None, None, ()])),
                    prefix=draw(st.sampled_from([False, False, True])),
                )
            )
        elif kind == "tool":
            # Tool results that answer no call: only before any call, where the reference's order is defined.
            if not any(m.tool_calls for m in msgs):
                msgs.append(Message("tool", draw(texts), tool_call_id=draw(st.sampled_from(["x", None]))))
        else:
            n = draw(st.integers(1, 3))
            calls = tuple(ToolCall(f"c{i}", draw(short_names), draw(_arguments)) for i in range(n))
            msgs.append(
                Message(
                    "assistant",
                    draw(texts),
                    reasoning_content=draw(st.one_of(st.none(), texts)),
                    tool_calls=calls,
                )
            )
            order = draw(st.permutations(range(n)))
            for i in order:
                msgs.append(
                    Message(
                        "tool",
                        draw(texts),
                        tool_call_id=f"c{i}",
                        image_sources=tuple(draw(st.lists(images, max_size=1))),
                    )
                )
    if draw(st.booleans()):
        msgs.append(
            Message(
                "assistant", draw(texts), reasoning_content=draw(st.one_of(st.none(), texts)), prefix=True
            )
        )
    fmt = draw(st.sampled_from(["text", "json_object", "json_schema", "regex"]))
    return Conversation(
        messages=tuple(msgs),
        thinking_mode=draw(st.booleans()),
        tools=tuple(draw(st.lists(tools, max_size=3))),
        tool_choice=draw(st.sampled_from(["auto", "none", "required"])),
        reasoning_effort=draw(st.sampled_from([None, "low", "high", "xhigh", "max"])),
        response_format=fmt,
        response_schema=draw(json_objects) if fmt == "json_schema" else None,
        response_regex="[a-z]+" if fmt == "regex" else None,
    )


def _ref_image(src: ImageSource) -> dr.ImageSource:
    if src.kind == "url":
        return dr.UrlImageSource(src.url or "", src.detail, path=src.path)
    if src.kind == "data_url":
        return dr.DataUrlImageSource(src.data_url or "", src.detail, path=src.path)
    return dr.BytesImageSource(src.data or b"", src.detail, path=src.path)


def _ref_tool(t: ToolDefinition) -> dr.ToolDefinition:
    return dr.ToolDefinition(t.name, t.description, t.parameters, t.strict, t.defer_loading)


def _ref_message(m: Message) -> dr.Message:
    imgs = [_ref_image(s) for s in m.image_sources]
    if m.role == "system":
        return dr.SystemMessage(m.content, imgs, None if m.tools is None else [_ref_tool(t) for t in m.tools])
    if m.role == "user":
        return dr.UserMessage(m.content, imgs)
    if m.role == "tool":
        return dr.ToolMessage(m.content, m.tool_call_id, imgs)
    if m.role == "latest_reminder":
        return dr.LatestReminderMessage(m.content)
    calls = None if m.tool_calls is None else [dr.ToolCall(c.id, c.name, c.arguments) for c in m.tool_calls]
    return dr.AssistantMessage(m.content, m.reasoning_content, calls, m.prefix)


def to_reference(conv: Conversation) -> dr.Conversation:
    """The same conversation as a `deepseek_recipe.Conversation`."""
    kwargs: dict[str, object] = {}
    if conv.response_format == "json_object":
        kwargs["response_format"] = "json_object"
    elif conv.response_format == "json_schema":
        kwargs["response_schema"] = conv.response_schema
    elif conv.response_format == "regex":
        kwargs["response_regex"] = conv.response_regex
    return dr.Conversation(
        [_ref_message(m) for m in conv.messages],
        thinking_mode=conv.thinking_mode,
        tools=[_ref_tool(t) for t in conv.tools],
        tool_choice=conv.tool_choice,
        reasoning_effort=conv.reasoning_effort,
        **kwargs,  # type: ignore[arg-type]
    )
