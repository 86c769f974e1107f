"""Every special marker, spelled by client text right beside the real structure it stands for, renders
exactly as the official reference renders it: the real structure is special, the spelling plain text.

One body per API, version and marker holds every structure a prompt has (system text, image parts,
tool definitions, historical calls and results, reasoning, reminders); every client text spells the
marker before and after its real counterpart.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from recipe.codecs import deepseek_v4, deepseek_v41

from recipe.codec import convert, render

V4 = "DeepSeek-V4-Pro"
V41 = "DeepSeek-V4.1-Flash"
IMAGE = "<｜image｜>"
MARKERS = sorted(
    {*deepseek_v4.SPECIAL_TOKENS, *deepseek_v41.SPECIAL_TOKENS}
    | {"<tool_result>", "</tool_result>", "<｜DSML｜tool_calls>", "<｜DSML｜ calls>", "</｜DSML｜invoke>",
       "<｜DSML｜ parameter", "<system-reminder>", "[Unsupported Image]"}
)  # fmt: skip
PNG = "data:image/png;base64,iVBORw0KGgo="


def spelled(m: str, tag: str) -> str:
    return f"{m}{tag}{m}"


def chat_body(model: str, m: str) -> dict[str, Any]:
    img = {"type": "image_url", "image_url": {"url": PNG}}
    text = {"type": "text", "text": spelled(m, "u")}
    return {
        "model": model,
        "thinking": {"type": "enabled"},
        "messages": [
            {"role": "system", "content": spelled(m, "s")},
            {"role": "user", "content": [text, img, {"type": "text", "text": m}, img, text]},
            {
                "role": "assistant",
                "content": spelled(m, "a"),
                "reasoning_content": spelled(m, "r"),
                "tool_calls": [
                    {"id": f"c{k}{m}", "type": "function", "function": {"name": "f", "arguments": json.dumps({"q": m})}}
                    for k in (2, 1)
                ],
            },
            {"role": "tool", "tool_call_id": f"c1{m}", "content": [text, img]},
            {"role": "tool", "tool_call_id": f"c2{m}", "content": spelled(m, "t")},
            {"role": "latest_reminder", "content": spelled(m, "rem")},
            {"role": "user", "content": [img, text]},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "description": spelled(m, "d"),
                    "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": m}}},
                },
            }
        ],
    }


def messages_body(model: str, m: str) -> dict[str, Any]:
    img = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    text = {"type": "text", "text": spelled(m, "u")}
    return {
        "model": model,
        "max_tokens": 100,
        "system": spelled(m, "s"),
        "messages": [
            {"role": "user", "content": [text, img, text]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": spelled(m, "r"), "signature": "s"},
                    {"type": "text", "text": spelled(m, "a")},
                    {"type": "tool_use", "id": "toolu_b", "name": "f", "input": {"q": m}},
                    {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {"q": m}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": [text, img, text]},
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": spelled(m, "t")},
                    text,
                ],
            },
            {"role": "system", "content": [text, img]},
            {"role": "user", "content": spelled(m, "u2")},
        ],
        "tools": [{"name": "f", "description": spelled(m, "d"), "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}],
    }


def responses_body(model: str, m: str) -> dict[str, Any]:
    img = {"type": "input_image", "image_url": PNG}
    text = {"type": "input_text", "text": spelled(m, "u")}
    return {
        "model": model,
        "instructions": spelled(m, "i"),
        "input": [
            {"role": "user", "content": [text, img, text, img]},
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": spelled(m, "r")}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": spelled(m, "a")}]},
            {"type": "function_call", "call_id": f"b{m}", "name": "f", "arguments": json.dumps({"q": m})},
            {"type": "function_call", "call_id": f"a{m}", "name": "f", "arguments": json.dumps({"q": m})},
            {"type": "function_call_output", "call_id": f"b{m}", "output": spelled(m, "o")},
            {"type": "function_call_output", "call_id": f"a{m}", "output": [{"type": "input_text", "text": m}]},
            {"role": "developer", "content": [text, img]},
            {"role": "user", "content": spelled(m, "u2")},
        ],
        "tools": [{"type": "function", "name": "f", "description": spelled(m, "d"), "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}],
    }


BODIES = {"chat": chat_body, "messages": messages_body, "responses": responses_body}


@pytest.mark.parametrize("model", [V4, V41])
@pytest.mark.parametrize("api", sorted(BODIES))
@pytest.mark.parametrize("marker", MARKERS)
def test_marker_beside_its_structure_matches_reference(reference_diff: Any, api: str, model: str, marker: str) -> None:
    text = json.dumps(BODIES[api](model, marker), ensure_ascii=False)
    assert reference_diff(api, text) is None, reference_diff(api, text)


@pytest.mark.parametrize("api", sorted(BODIES))
def test_v41_image_placeholder_is_the_real_part_not_the_text(api: str) -> None:
    """The issue's example: text spelling the placeholder, then a real image part."""
    body = {
        "chat": lambda: {"model": V41, "messages": [{"role": "user", "content": [{"type": "text", "text": f"look {IMAGE} here"}, {"type": "image_url", "image_url": {"url": PNG}}]}]},
        "messages": lambda: {"model": V41, "max_tokens": 9, "system": f"sys {IMAGE}", "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]}] if False else [{"role": "system", "content": [{"type": "text", "text": f"look {IMAGE} here"}, {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}, {"role": "user", "content": "q"}]},
        "responses": lambda: {"model": V41, "input": [{"role": "user", "content": [{"type": "input_text", "text": f"look {IMAGE} here"}, {"type": "input_image", "image_url": PNG}]}]},
    }[api]()
    rendered = render(convert(api, json.dumps(body)))
    spelled_at = rendered.prompt.index(f"look {IMAGE}") + len("look ")
    image_ranges = [(a, b) for a, b in rendered.special_ranges if rendered.prompt[a:b] == IMAGE]
    assert len(image_ranges) == 1
    assert image_ranges[0][0] > spelled_at
    assert (spelled_at, spelled_at + len(IMAGE)) not in rendered.special_ranges
