"""Behaviour the golden corpus does not pin down: stop sequences never leak under any split, n > 1 choices,
the `reasoning` spelling, ChatML tool calls, logprobs, SSE framing."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.conversation import (
    Conversation,
    ConversationRequest,
    InferenceOptions,
    ModelVersion,
    ParsingOptions,
    ThinkingInitialStage,
)
from recipe.stream import Finish, Ready, StreamProcessor, TextUpdate, TokenLogprob, TokenUpdate, merge_choices
from recipe.stream.accumulate import accumulate_chat
from recipe.stream.sse import Event


def make_request(*, thinking: bool = False, stops: tuple[str, ...] = (), tools: bool = True, n: int = 1,
                 include_usage: bool = False) -> ConversationRequest:
    return ConversationRequest(
        conversation=Conversation(thinking_mode=thinking),
        model_version=ModelVersion.V4,
        inference_options=InferenceOptions(n=n, logprobs=True, top_logprobs=1),
        parsing_options=ParsingOptions(
            parse_tool_calls=tools,
            thinking_initial_stage=ThinkingInitialStage.REASONING_START if thinking else None,
            stop_sequences=stops,
        ),
        stream=True,
        include_usage=include_usage,
    )


def feed_all(proc: StreamProcessor, updates: list[Any]) -> list[Event]:
    events: list[Event] = []
    for u in updates:
        events += proc.feed(u)
        if proc.finished:
            break
    return events + proc.finish()


def chat_content(events: list[Event]) -> list[str]:
    out = []
    for e in events:
        if not e.done:
            delta = e.data["choices"][0]["delta"]
            if delta.get("content"):
                out.append(delta["content"])
    return out


alphabet = st.sampled_from(list("ab END\n<｜/"))


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet, max_size=40),
    stop=st.sampled_from(["END", "b\n", "<｜", "aa"]),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=12),
    api=st.sampled_from(["chat", "messages", "responses"]),
)
def test_text_after_a_stop_sequence_never_leaks(text: str, stop: str, cuts: list[int], api: str) -> None:
    proc = StreamProcessor(api, make_request(stops=(stop,), tools=False), response_id="r", model="m", created=1)  # type: ignore[arg-type]
    bounds = sorted({0, len(text), *[c for c in cuts if c <= len(text)]})
    updates: list[Any] = [Ready(4)]
    updates += [TextUpdate(text[a:b], 1) for a, b in itertools.pairwise(bounds)]
    updates.append(Finish("stop"))
    events = feed_all(proc, updates)
    expected = text.lstrip("\n")
    if stop in expected:
        expected = expected[: expected.index(stop)]
    body = proc.response()
    if api == "chat":
        content = body["choices"][0]["message"]["content"]
        streamed = "".join(chat_content(events))
        assert streamed == content
    elif api == "messages":
        content = "".join(b["text"] for b in body["content"] if b["type"] == "text")
        if stop in text.lstrip("\n"):
            assert body["stop_reason"] == "stop_sequence" and body["stop_sequence"] == stop
    else:
        content = "".join(p["text"] for item in body["output"] if item["type"] == "message" for p in item["content"])
    assert content == expected
    assert stop not in content


def test_n_choices_merge_into_one_chat_body() -> None:
    procs = [
        StreamProcessor("chat", make_request(n=2), response_id="r", model="m", created=7, choice_index=i, emit_done=False)
        for i in range(2)
    ]
    chunks: list[Event] = []
    for i, proc in enumerate(procs):
        chunks += feed_all(proc, [Ready(10, 2), TextUpdate(f"answer {i}", 2), Finish("stop" if i == 0 else "length")])
    assert not any(e.done for e in chunks)
    assert {e.data["choices"][0]["index"] for e in chunks} == {0, 1}
    merged = merge_choices(procs)
    assert [c["index"] for c in merged["choices"]] == [0, 1]
    assert [c["message"]["content"] for c in merged["choices"]] == ["answer 0", "answer 1"]
    assert [c["finish_reason"] for c in merged["choices"]] == ["stop", "length"]
    assert merged["usage"]["completion_tokens"] == 4 and merged["usage"]["total_tokens"] == 14
    # the interleaved chunk stream accumulates to the same body
    assert accumulate_chat(chunks, created=7)["choices"] == merged["choices"]


def test_reasoning_field_both_spellings() -> None:
    proc = StreamProcessor("chat", make_request(thinking=True), response_id="r", model="m", created=1,
                           reasoning_field="both")
    events = feed_all(proc, [Ready(1), TextUpdate("Think.</think>Answer", 2), Finish("stop")])
    first = events[0].data["choices"][0]["delta"]
    assert first["reasoning_content"] == "" and first["reasoning"] == ""
    message = proc.response()["choices"][0]["message"]
    assert message["reasoning_content"] == "Think." and message["content"] == "Answer"


def test_chatml_tool_calls_become_tool_call_deltas() -> None:
    req = make_request()
    out = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for api in ("chat", "messages", "responses"):
        proc = StreamProcessor(api, req, response_id="r", model="m", output_format="chatml", created=1)  # type: ignore[arg-type]
        updates: list[Any] = [Ready(3), TextUpdate("Checking.\n", 1)]
        updates += [TextUpdate(out[i : i + 5], 1) for i in range(0, len(out), 5)]
        feed_all(proc, [*updates, Finish("stop")])
        body = proc.response()
        if api == "chat":
            msg = body["choices"][0]["message"]
            assert msg["content"] == "Checking."
            call = msg["tool_calls"][0]
            assert call["function"]["name"] == "get_weather"
            assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
            assert body["choices"][0]["finish_reason"] == "tool_calls"
        elif api == "messages":
            assert body["content"][-1]["input"] == {"city": "Paris"} and body["stop_reason"] == "tool_use"
        else:
            assert body["output"][-1]["type"] == "function_call" and body["output"][-1]["name"] == "get_weather"


def test_logprobs_follow_their_tokens(v4_tokenizer: Any) -> None:
    ids = v4_tokenizer.encode_plain("Hello world, ok")
    for api in ("chat", "responses"):
        proc = StreamProcessor(api, make_request(tools=False), response_id="r", model="m", tokenizer=v4_tokenizer,  # type: ignore[arg-type]
                               created=1)
        updates: list[Any] = [Ready(2)]
        updates += [TokenUpdate([i], [TokenLogprob(-0.25 * k, [(i, -0.25 * k)])]) for k, i in enumerate(ids)]
        feed_all(proc, [*updates, Finish("stop")])
        body = proc.response()
        if api == "chat":
            entries = body["choices"][0]["logprobs"]["content"]
        else:
            entries = body["output"][0]["content"][0]["logprobs"]
        assert [e["token"] for e in entries] == [v4_tokenizer.decode([i]) for i in ids]
        assert [e["logprob"] for e in entries] == [-0.25 * k for k in range(len(ids))]
        assert all(e["top_logprobs"][0]["token"] == e["token"] for e in entries)


def test_sse_frames() -> None:
    proc = StreamProcessor("messages", make_request(), response_id="r", model="m", created=1)
    events = feed_all(proc, [Ready(1), TextUpdate("Hi", 1), Finish("stop")])
    frame = events[0].sse()
    assert frame.startswith(b"event: message_start\ndata: {") and frame.endswith(b"}\n\n")
    chat = StreamProcessor("chat", make_request(), response_id="r", model="m", created=1)
    chat_events = feed_all(chat, [Ready(1), TextUpdate("Hi", 1), Finish("stop")])
    assert chat_events[0].sse().startswith(b"data: {")
    assert chat_events[-1].sse() == b"data: [DONE]\n\n"


def test_event_data_changes_are_rendered() -> None:
    """A caller that updates `event.data` (a server adding response fields) sees it in `sse()`."""
    for api in ("chat", "messages", "responses"):
        proc = StreamProcessor(api, make_request(), response_id="r", model="m", created=1)  # type: ignore[arg-type]
        events = feed_all(proc, [Ready(1), TextUpdate("Hi", 1), Finish("stop")])
        for event in events:
            if event.done:
                continue
            before = event.sse()
            event.data["x_extra"] = 1
            assert event.sse() != before and b'"x_extra":1' in event.sse()


def test_call_ids_have_the_reference_form_and_do_not_repeat() -> None:
    import re

    from recipe.stream.call_ids import new_call_id

    ids = [new_call_id(i % 100) for i in range(5000)]
    assert all(re.fullmatch(r"call_\d\d_[A-Za-z0-9]{24}", x) for x in ids)
    assert ids[7].startswith("call_07_")
    assert len(set(ids)) == len(ids)
