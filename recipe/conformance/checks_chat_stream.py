"""Chat Completions streaming checks: framing, chunk schema, lifecycle, tool-call deltas, usage, SDK helper."""

from __future__ import annotations

from typing import Any

from recipe.conformance import probes
from recipe.conformance.check import (
    CheckSkipped,
    check,
    expect,
    expect_schema,
    expect_status,
    parse_json,
    skip_if_rejected,
)
from recipe.conformance.sdk import openai_client
from recipe.conformance.session import Exchange, Session


def _chunks(ex: Exchange) -> list[dict[str, Any]]:
    expect_status(ex, 200)
    expect(ex.is_sse, f"content-type {ex.content_type!r}, not text/event-stream", ex)
    chunks = [c for c in ex.data_events() if isinstance(c, dict)]
    expect(chunks, "no JSON chunks in the stream", ex)
    return chunks


def _content_chunks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in chunks if c.get("choices")]


def _deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [ch.get("delta") or {} for c in chunks for ch in c.get("choices", [])]


def _tool_chunks(s: Session) -> tuple[Exchange, list[dict[str, Any]]]:
    ex = probes.chat_named_tool(s, stream=True)
    skip_if_rejected(ex, "tools with a named tool_choice")
    chunks = _chunks(ex)
    calls = [tc for d in _deltas(chunks) for tc in d.get("tool_calls") or []]
    expect(calls, "no tool_calls deltas for a named tool_choice", ex)
    return ex, chunks


@check("chat.stream.content_type", "chat", "required", "stream: true", "200 text/event-stream")
def content_type(s: Session) -> None:
    _chunks(probes.chat_stream(s))


@check("chat.stream.data_only_framing", "chat", "required", "stream: true", "every event is data: {json}; no event: lines; JSON parses")
def data_only(s: Session) -> None:
    ex = probes.chat_stream(s)
    _chunks(ex)
    for ev in ex.events():
        expect(ev.event is None, f"unexpected event: line {ev.event!r} on a Chat stream", ex)
        if not ev.is_done:
            parse_json(ev.data, ex, "a data line")


@check("chat.stream.done", "chat", "required", "stream: true", "the last event is data: [DONE]")
def done(s: Session) -> None:
    ex = probes.chat_stream(s)
    _chunks(ex)
    evs = ex.events()
    expect(evs and evs[-1].is_done, "stream does not end with data: [DONE]", ex)
    expect(sum(e.is_done for e in evs) == 1, "more than one [DONE]", ex)


@check("chat.stream.chunk_schema", "chat", "required", "stream: true (text and tool-call streams)", "every chunk valid against CreateChatCompletionStreamResponse")
def chunk_schema(s: Session) -> None:
    ex = probes.chat_stream(s)
    for c in _chunks(ex):
        expect_schema("openai.CreateChatCompletionStreamResponse", c, ex, "chunk")


@check("chat.stream.identity", "chat", "required", "stream: true", "object chat.completion.chunk; id, created, model identical in every chunk")
def identity(s: Session) -> None:
    ex = probes.chat_stream(s)
    chunks = _chunks(ex)
    expect(all(c.get("object") == "chat.completion.chunk" for c in chunks), "a chunk's object is not chat.completion.chunk", ex)
    for key in ("id", "created", "model"):
        values = {repr(c.get(key)) for c in chunks}
        expect(len(values) == 1, f"{key} changes across chunks: {sorted(values)[:3]}", ex)


@check("chat.stream.role_first", "chat", "required", "stream: true", "the first delta carries role assistant")
def role_first(s: Session) -> None:
    ex = probes.chat_stream(s)
    deltas = _deltas(_content_chunks(_chunks(ex)))
    expect(deltas and deltas[0].get("role") == "assistant", "first delta lacks role: assistant", ex)
    expect(all(d.get("role") in (None, "assistant") for d in deltas) and all("role" not in d or d["role"] is not None for d in deltas), "a delta has a null or other role", ex)


@check("chat.stream.single_finish", "chat", "required", "stream: true", "exactly one chunk per choice has a finish_reason, and no content follows it")
def single_finish(s: Session) -> None:
    ex = probes.chat_stream(s)
    seen_finish = False
    count = 0
    for c in _content_chunks(_chunks(ex)):
        for ch in c["choices"]:
            d = ch.get("delta") or {}
            if seen_finish:
                expect(not d.get("content") and not d.get("tool_calls"), "content after finish_reason", ex)
            if ch.get("finish_reason") is not None:
                count += 1
                seen_finish = True
    expect(count == 1, f"{count} chunks carry a finish_reason", ex)


@check("chat.stream.matches_non_stream", "chat", "recommended", "the same temperature-0 request with and without stream", "concatenated delta.content equals the non-stream content")
def matches_non_stream(s: Session) -> None:
    ex = probes.chat_stream(s)
    text = "".join(d.get("content") or "" for d in _deltas(_chunks(ex)))
    ref = probes.chat_content(probes.chat_basic(s))
    expect(text == ref, "streamed content differs from the non-stream content", ex, non_stream=ref, streamed=text)


@check("chat.stream.include_usage", "chat", "required", "stream_options: {include_usage: true}", "usage null on every chunk but one final chunk with choices [] and totals, before [DONE]")
def include_usage(s: Session) -> None:
    ex = probes.chat_stream_usage(s)
    chunks = _chunks(ex)
    last = chunks[-1]
    expect(last.get("choices") == [], "final chunk does not have choices: []", ex)
    usage: Any = last.get("usage")
    expect(isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int), "final chunk lacks usage totals", ex)
    expect(usage["total_tokens"] == usage.get("prompt_tokens", -1) + usage.get("completion_tokens", -1), "usage totals do not add up", ex)
    for c in chunks[:-1]:
        expect("usage" in c and c["usage"] is None, "a non-final chunk lacks \"usage\": null", ex)


@check("chat.stream.no_usage_unasked", "chat", "recommended", "stream without stream_options", "no choices: [] usage chunk")
def no_usage(s: Session) -> None:
    ex = probes.chat_stream(s)
    expect(all(c.get("choices") for c in _chunks(ex)), "a usage-only chunk was sent without include_usage", ex)


@check("chat.stream.length", "chat", "recommended", "stream with max_tokens: 1", "finish_reason length")
def stream_length(s: Session) -> None:
    ex = s.post("chat", probes.chat_body(s, stream=True, max_tokens=1))
    reasons = [ch.get("finish_reason") for c in _chunks(ex) for ch in c.get("choices", []) if ch.get("finish_reason")]
    expect(reasons == ["length"], f"finish reasons {reasons}", ex)


@check("chat.stream.stop_no_leak", "chat", "required", "stream with stop: [a word the output contains]", "no delta contains any part of the stop string past the cut")
def stop_no_leak(s: Session) -> None:
    ref = probes.chat_content(probes.chat_basic(s)) or ""
    stop = probes.pick_stop(ref)
    if stop is None:
        raise CheckSkipped("the reference output is too short to pick a stop string from")
    ex = s.post("chat", probes.chat_body(s, stream=True, stop=[stop]))
    text = "".join(d.get("content") or "" for d in _deltas(_chunks(ex)))
    expect(stop not in text, f"stop string {stop!r} leaked into the stream", ex, streamed=text)
    if ref.startswith(text) and ref.find(stop) >= 0:
        expect(text == ref[: ref.find(stop)], "stream is not the reference cut at the stop (partial stop leaked?)", ex, streamed=text, stop=stop)


@check("chat.stream.tool_call_index", "chat", "required", "streamed named tool call", "every tool_calls delta has an integer index")
def tool_index(s: Session) -> None:
    ex, chunks = _tool_chunks(s)
    for d in _deltas(chunks):
        for tc in d.get("tool_calls") or []:
            expect(isinstance(tc.get("index"), int), "a tool_calls delta lacks index", ex)


@check("chat.stream.tool_call_identity_once", "chat", "required", "streamed named tool call", "id, type and function.name only in the first delta of each index")
def tool_identity_once(s: Session) -> None:
    ex, chunks = _tool_chunks(s)
    seen: dict[Any, int] = {}
    for d in _deltas(chunks):
        for tc in d.get("tool_calls") or []:
            idx = tc.get("index")
            first = idx not in seen
            seen[idx] = seen.get(idx, 0) + 1
            name = (tc.get("function") or {}).get("name")
            if first:
                expect(tc.get("id") and name, "first delta of a tool call lacks id or name", ex)
            else:
                expect(not tc.get("id") and not name, "id or name repeated in a later delta", ex)


@check("chat.stream.tool_call_finish", "chat", "required", "streamed named tool call", "finish_reason tool_calls; concatenated arguments parse as a JSON object")
def tool_finish(s: Session) -> None:
    ex, chunks = _tool_chunks(s)
    reasons = [ch.get("finish_reason") for c in chunks for ch in c.get("choices", []) if ch.get("finish_reason")]
    expect(reasons == ["tool_calls"], f"finish reasons {reasons}", ex)
    args: dict[Any, str] = {}
    for d in _deltas(chunks):
        for tc in d.get("tool_calls") or []:
            args[tc.get("index")] = args.get(tc.get("index"), "") + ((tc.get("function") or {}).get("arguments") or "")
    for text in args.values():
        expect(isinstance(parse_json(text, ex, "concatenated arguments"), dict), "arguments are not an object", ex)


@check("chat.stream.tool_chunk_schema", "chat", "required", "streamed named tool call", "every chunk valid against CreateChatCompletionStreamResponse")
def tool_chunk_schema(s: Session) -> None:
    ex, chunks = _tool_chunks(s)
    for c in chunks:
        expect_schema("openai.CreateChatCompletionStreamResponse", c, ex, "chunk")


def _sdk_final(stream: Any) -> Any:
    """Drain an openai chat stream helper; its final completion (or, when the SDK refuses to parse a
    length-cut completion, its snapshot — a length finish is not a protocol fault)."""
    import openai

    for _ in stream:
        pass
    try:
        return stream.get_final_completion()
    except openai.LengthFinishReasonError:
        return stream.current_completion_snapshot


def _sdk_text_completion(s: Session) -> Any:
    """The SDK's final completion of the basic request, or the exception it raised (memoised per run)."""

    def make() -> Any:
        client = openai_client(s)
        body = probes.chat_body(s)
        try:
            with client.chat.completions.stream(
                model=body["model"], messages=body["messages"], max_tokens=body["max_tokens"], temperature=0, seed=1
            ) as stream:
                return _sdk_final(stream)
        except Exception as exc:  # the SDK's own failure is the finding
            return exc

    return s.memo("openai.chat.stream", make)


@check("chat.sdk.stream_helper", "chat", "required", "openai SDK chat.completions.stream()", "consumes the stream without error; the final completion has string content and a finish_reason")
def sdk_stream(s: Session) -> None:
    final = _sdk_text_completion(s)
    expect(not isinstance(final, Exception), f"openai SDK stream helper raised {type(final).__name__}: {final}")
    choice = final.choices[0]
    expect(isinstance(choice.message.content, str), "SDK final completion has no string content")
    expect(choice.finish_reason in ("stop", "length"), f"SDK final finish_reason {choice.finish_reason!r}")


@check("chat.sdk.matches_non_stream", "chat", "recommended", "openai SDK stream and a non-stream request at temperature 0", "the same content")
def sdk_matches(s: Session) -> None:
    final = _sdk_text_completion(s)
    if isinstance(final, Exception):
        raise CheckSkipped(f"the SDK stream itself failed ({type(final).__name__}); see chat.sdk.stream_helper")
    text = final.choices[0].message.content
    ref = probes.chat_content(probes.chat_basic(s))
    expect(text == ref, "SDK final content differs from the non-stream content", None, sdk=text, non_stream=ref)


@check("chat.sdk.stream_tools", "chat", "required", "openai SDK chat.completions.stream() with a named tool", "final tool call has one id and the exact name; arguments parse")
def sdk_stream_tools(s: Session) -> None:
    probe = probes.chat_named_tool(s, stream=True)
    skip_if_rejected(probe, "tools with a named tool_choice")
    client = openai_client(s)
    try:
        with client.chat.completions.stream(
            model=s.model,
            messages=[{"role": "user", "content": probes.TOOL_PROMPT}],
            tools=probes.chat_tools(),  # type: ignore[arg-type]
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64,
            temperature=0,
        ) as stream:
            final = _sdk_final(stream)
    except Exception as exc:
        expect(False, f"openai SDK stream helper raised {type(exc).__name__}: {exc}")
        return
    calls = final.choices[0].message.tool_calls or []
    expect(calls, "SDK final completion has no tool call")
    fn = calls[0].function  # type: ignore[union-attr]
    expect(fn.name == "get_weather", f"SDK reassembled the name as {fn.name!r} (repeated name deltas?)")
    expect(str(calls[0].id).count(str(calls[0].id)[:6]) == 1, f"SDK reassembled the id as {calls[0].id!r} (repeated id deltas?)")
    parse_json(fn.arguments, None, "SDK-reassembled arguments")
