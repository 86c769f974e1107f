"""Error shapes per API, conversion options, resolve_max_tokens, and what Recipe accepts beyond the reference."""

from __future__ import annotations

import json
from typing import Any

import pytest

from recipe import schemas
from recipe.codec import ConversionOptions, convert, resolve_max_tokens
from recipe.conversation import ModelVersion
from recipe.errors import RequestError

HI = [{"role": "user", "content": "Hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "DeepSeek-V4-Pro", "messages": HI, **fields}


def error_of(api: str, body: Any, options: ConversionOptions | None = None) -> RequestError:
    with pytest.raises(RequestError) as info:
        convert(api, body, options)
    return info.value


@pytest.mark.parametrize(
    ("api", "body", "schema"),
    [
        ("chat", {"model": "gpt-4o", "messages": HI}, "openai.ErrorResponse"),
        ("responses", {"model": "DeepSeek-V4-Pro", "input": []}, "openai.ErrorResponse"),
        ("messages", {"model": "DeepSeek-V4-Pro", "messages": []}, "anthropic.ErrorResponse"),
        ("messages", "{not json", "anthropic.ErrorResponse"),
    ],
)
def test_error_body_has_the_called_apis_shape(api: str, body: Any, schema: str) -> None:
    err = error_of(api, body)
    assert err.status == 400
    payload = err.body(api)
    assert schemas.errors(schema, payload) == []
    if api == "messages":
        assert payload == {"type": "error", "error": {"type": "invalid_request_error", "message": err.message}}
    else:
        assert payload["error"]["message"] == err.message
        assert payload["error"]["type"] == payload["error"]["code"] == "invalid_request_error"


def test_body_may_be_bytes_str_or_dict_with_equal_results() -> None:
    body = chat(tools=[{"type": "function", "function": {"name": "f"}}], temperature=0.3, thinking={"type": "disabled"})
    text = json.dumps(body)
    a, b, c = convert("chat", body), convert("chat", text), convert("chat", text.encode())
    assert a == b == c
    assert a.inference_options.temperature == pytest.approx(0.3, abs=1e-7)


def test_syntax_errors_name_line_and_byte_column() -> None:
    assert error_of("chat", '{\n"model": tru}').message == "invalid JSON request: expected ident at line 2 column 13"
    assert error_of("chat", "").message == "invalid JSON request: EOF while parsing a value at line 1 column 0"
    # the column counts bytes: é is two
    msg = error_of("chat", '{"model":"é\x01"}').message
    assert msg.endswith("at line 1 column 13")
    assert error_of("chat", "[]").kind == "parse"


def test_model_aliases_and_table_replacement() -> None:
    opts = ConversionOptions().with_model_alias("SmolLM2-135M-Instruct", ModelVersion.V41)
    req = convert("chat", {"model": "SmolLM2-135M-Instruct", "messages": HI}, opts)
    assert req.model_version is ModelVersion.V41 and req.model == "SmolLM2-135M-Instruct"
    msg = error_of("chat", {"model": "gpt", "messages": HI}, opts).message
    assert msg == (
        "The supported API model names are DeepSeek-V4-Pro, DeepSeek-V4.1-Flash, SmolLM2-135M-Instruct, but you passed gpt."
    )
    only = ConversionOptions(model_versions_by_name={"ds": ModelVersion.V4})
    assert error_of("chat", chat(), only).message == "The supported API model names are ds, but you passed DeepSeek-V4-Pro."


def test_default_thinking_mode_and_max_tokens_bounds() -> None:
    off = ConversionOptions(default_thinking_mode=False, non_thinking_max_tokens_upper_bound=100)
    req = convert("chat", chat(max_tokens=100), off)
    assert not req.conversation.thinking_mode and req.conversation.reasoning_effort is None
    assert error_of("chat", chat(max_tokens=101), off).message == (
        "Invalid max_tokens value, the valid range of max_tokens is [1, 100]"
    )
    clamped = convert("messages", {"model": "DeepSeek-V4-Pro", "max_tokens": 500, "messages": HI}, off)
    assert clamped.inference_options.max_tokens == 100


def test_reasoning_content_reject_behavior() -> None:
    body = chat(
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"},
        ],
        tools=[{"type": "function", "function": {"name": "f"}}],
    )
    assert convert("chat", body).conversation.messages[1].reasoning_content == ""
    err = error_of("chat", body, ConversionOptions(reasoning_content_behavior="reject"))
    assert err.message == "The `reasoning_content` in the thinking mode must be passed back to the API."


def test_web_search_behaviors() -> None:
    body = {"model": "DeepSeek-V4-Pro", "max_tokens": 5, "messages": HI, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    assert error_of("messages", body).message == "tools[0]: server tools are not supported"
    assert convert("messages", body, ConversionOptions(messages_web_search="drop")).conversation.tools == ()
    rbody = {"model": "DeepSeek-V4-Pro", "input": "x", "tools": [{"type": "web_search"}]}
    assert convert("responses", rbody).conversation.tools == ()
    assert error_of("responses", rbody, ConversionOptions(responses_web_search="reject")).status == 400


@pytest.mark.parametrize(
    ("thinking", "effort", "max_tokens", "prompt", "limit", "expected"),
    [
        (True, "high", None, 10, 100, 90),
        (True, "high", None, 100, 100, 1),
        (False, None, None, 10, 100000, 8192),
        (True, "max", None, 10, 1000000, 131072),
        (True, "low", None, 10, 1000000, 65536),
        (True, "high", 50, 10, 100, 50),
    ],
)
def test_resolve_max_tokens(thinking: bool, effort: str | None, max_tokens: int | None, prompt: int, limit: int, expected: int) -> None:
    fields: dict[str, Any] = {"thinking": {"type": "enabled" if thinking else "disabled"}}
    if effort:
        fields["reasoning_effort"] = effort
    if max_tokens:
        fields["max_tokens"] = max_tokens
    assert resolve_max_tokens(convert("chat", chat(**fields)), prompt, limit) == expected


def test_resolve_max_tokens_errors() -> None:
    with pytest.raises(RequestError) as info:
        resolve_max_tokens(convert("chat", chat()), 101, 100)
    assert info.value.message == (
        "This model's maximum context length is 100 tokens. However, you requested 101 tokens "
        "(101 in the messages, 0 in the completion). Please reduce the length of the messages or completion."
    )
    with pytest.raises(RequestError) as info:
        resolve_max_tokens(convert("chat", chat(max_tokens=100)), 10, 100)
    assert "you requested 110 tokens (10 in the messages, 100 in the completion)" in info.value.message


def test_beyond_the_reference_fields_are_kept() -> None:
    req = convert(
        "chat",
        chat(n=4, presence_penalty=0.5, frequency_penalty=-1, logprobs=True, top_logprobs=3, stream=True, stream_options={"include_usage": True}),
    )
    inf = req.inference_options
    assert (inf.n, inf.presence_penalty, inf.frequency_penalty, inf.logprobs, inf.top_logprobs) == (4, 0.5, -1.0, True, 3)
    assert req.include_usage and req.stream
    assert not convert("chat", chat(stream=True, stream_options={"include_usage": False})).include_usage
    for n in (0, 17):
        assert error_of("chat", chat(n=n)).message == "Invalid n value, the valid range of n is [1, 16]"
    msg = convert("messages", {"model": "DeepSeek-V4-Pro", "max_tokens": 3, "messages": HI, "top_k": 40})
    assert msg.inference_options.top_k == 40
    assert convert("messages", {"model": "DeepSeek-V4-Pro", "max_tokens": 3, "messages": HI, "top_k": "x"}).inference_options.top_k is None
    resp = convert("responses", {"model": "DeepSeek-V4-Pro", "input": "x", "previous_response_id": "resp_1", "top_logprobs": 2})
    assert resp.previous_response_id == "resp_1"
    assert resp.inference_options.logprobs and resp.inference_options.top_logprobs == 2


def test_unknown_api_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown api"):
        convert("completions", chat())


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"\xff"}]}',
        b'{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"a\xc3\xa9\xc3"}]}',
        b'{"a\xff":1}',
        b'{"a":1}\xff',
        b"\xff",
        b'{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"\\ud800"}]}',
    ],
)
def test_byte_bodies_fail_like_the_reference(raw: bytes) -> None:
    """Invalid UTF-8 and lone surrogates: the reference's message (live oracle, dev dependency)."""
    import deepseek_recipe as dr

    with pytest.raises(ValueError) as ref:
        dr.ChatCompletionRequest(raw)
    err = error_of("chat", raw)
    assert (err.kind, err.message) == ("parse", str(ref.value))


def test_chat_accepts_vllm_reasoning_field_on_assistant_history() -> None:
    from recipe.codec import convert

    def body(**assistant: object) -> dict[str, object]:
        return {"model": "DeepSeek-V4-Pro", "tools": [{"type": "function", "function": {"name": "f"}}], "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", **assistant,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"}]}

    by_name = convert("chat", body(reasoning="thought"))
    assert by_name.conversation.messages[1].reasoning_content == "thought"
    assert by_name == convert("chat", body(reasoning_content="thought"))
    # reasoning_content wins when both are sent; a non-string `reasoning` is ignored as the reference ignores it
    assert convert("chat", body(reasoning_content="a", reasoning="b")).conversation.messages[1].reasoning_content == "a"
    assert convert("chat", body(reasoning=5)) == convert("chat", body())
