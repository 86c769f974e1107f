from recipe import schemas
from recipe.conformance.sse import parse_sse


def test_sse_parser_tolerates_crlf_missing_space_and_comments() -> None:
    raw = b": keep-alive\r\nevent: a\r\ndata:{\"x\":1}\r\n\r\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n"
    evs = parse_sse(raw)
    assert [(e.event, e.data) for e in evs] == [("a", '{"x":1}'), (None, "line1\nline2"), (None, "[DONE]")]
    assert evs[0].json() == {"x": 1} and evs[-1].is_done


def test_schema_fixes_accept_what_real_servers_send() -> None:
    # nullable (OpenAPI 3.0) rewritten: a null finish_reason in a chunk is valid
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}]}
    assert schemas.errors("openai.CreateChatCompletionStreamResponse", chunk) == []
    # Anthropic ping events and 413 errors
    assert schemas.errors("anthropic.RawMessageStreamEvent", {"type": "ping"}) == []
    assert schemas.errors("anthropic.ErrorResponse", {"type": "error", "error": {"type": "request_too_large", "message": "big"}}) == []
    # and still reject what is wrong
    assert schemas.errors("openai.CreateChatCompletionStreamResponse", {**chunk, "choices": [{"delta": {}}]})
    assert schemas.errors("openai.ErrorResponse", {"detail": "x"})


def test_all_schemas_compile() -> None:
    for name in schemas.names():
        schemas.validator(name).check_schema(schemas.load(name))
