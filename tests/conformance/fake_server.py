"""A small, deterministic, protocol-correct server for testing the conformance runner — with injectable faults.

It speaks Chat Completions, Messages and Responses from a fixed sentence (one word per "token"), honours
max_tokens, stop strings, named/required tool choices, json_schema (an instance built from the schema),
n, logprobs, include_usage, Responses storage and auth. Each fault in `FAULTS` breaks exactly one rule the
way real servers have been seen to break it.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

SENTENCE = "The sea is calm and blue under the morning sun, and small boats drift slowly toward the harbor."
MODEL = "fake-model"
FAULTS = (
    "missing_index",
    "repeated_tool_ids",
    "json_for_stream",
    "missing_event_lines",
    "usage_missing",
    "stop_leaked",
    "error_200",
    "wrong_error_shape",
)
MAX_BODY = 8 << 20
_ids = itertools.count(1)


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def words(max_tokens: int) -> list[str]:
    toks = re.findall(r"\s*\S+", SENTENCE)
    return toks[:max_tokens]


def instance_of(schema: dict[str, Any]) -> Any:
    """A minimal instance of a simple JSON Schema (objects, strings, numbers, booleans, arrays, enums)."""
    if "enum" in schema:
        return schema["enum"][0]
    t = schema.get("type", "object")
    if t == "object":
        props = schema.get("properties", {})
        return {k: instance_of(v) for k, v in props.items() if k in schema.get("required", list(props))}
    if t == "string":
        return "Paris"[: schema.get("maxLength", 5)]
    if t == "integer":
        return 1
    if t == "number":
        return 1.5
    if t == "boolean":
        return True
    if t == "array":
        return []
    return None


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + (data if isinstance(data, bytes) else orjson.dumps(data)) + b"\n\n"


class Generation:
    """What the fake model 'says' for a request: text pieces or one tool call, and why it stopped."""

    def __init__(self, max_tokens: int, stops: list[str], tool: dict[str, Any] | None, json_doc: Any, leak_stop: bool) -> None:
        self.tool = tool
        self.stop_sequence: str | None = None
        if tool is not None:
            self.pieces: list[str] = []
            self.finish = "tool"
            return
        if json_doc is not None:
            text = orjson.dumps(json_doc).decode()
            self.pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
            self.finish = "stop"
            return
        pieces = words(max_tokens)
        self.finish = "length" if len(pieces) < len(words(10_000)) else "stop"
        text = "".join(pieces)
        for st in stops:
            i = text.find(st)
            if i >= 0:
                self.finish, self.stop_sequence = "stop", st
                if not leak_stop:
                    text = text[:i]
                break
        self.pieces = []
        for w in pieces:
            if not text:
                break
            take = w[: len(text)]
            self.pieces.append(take)
            text = text[len(take) :]
        if text:
            self.pieces.append(text)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def create_app(faults: frozenset[str] = frozenset(), api_key: str | None = None) -> FastAPI:
    app = FastAPI()
    stored: dict[str, dict[str, Any]] = {}

    def error(api: str, exc: ApiError) -> Response:
        status = 200 if "error_200" in faults else exc.status
        if "wrong_error_shape" in faults:
            body: dict[str, Any] = {"detail": exc.message}
        elif api == "messages":
            body = {"type": "error", "error": {"type": exc.kind, "message": exc.message}}
        else:
            body = {"error": {"message": exc.message, "type": exc.kind, "param": None, "code": None}}
        return JSONResponse(body, status_code=status, headers={"x-request-id": "req_fake"})

    def check_auth(api: str, request: Request) -> None:
        if not api_key:
            return
        bearer = request.headers.get("authorization", "")
        given = bearer[7:] if bearer.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        if given != api_key:
            raise ApiError(401, "invalid api key", "authentication_error")

    async def read_body(api: str, request: Request) -> dict[str, Any]:
        check_auth(api, request)
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise ApiError(413, "request body too large", "request_too_large")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"invalid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "body must be a JSON object")
        if body.get("model") != MODEL:
            raise ApiError(404, f"model {body.get('model')!r} not found", "not_found_error" if api == "messages" else "invalid_request_error")
        t = body.get("temperature", 1)
        if not isinstance(t, (int, float)) or not 0 <= t <= 2:
            raise ApiError(400, "temperature must be in [0, 2]")
        p = body.get("top_p", 1)
        if not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise ApiError(400, "top_p must be in (0, 1]")
        mt = body.get("max_tokens", body.get("max_output_tokens", 16))
        if not isinstance(mt, int) or mt < 1:
            raise ApiError(400, "max_tokens must be a positive integer")
        return body

    def text_of(content: Any) -> str:
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if content is None:
            return ""
        raise ApiError(400, "content must be a string or a list of parts")

    def prompt_tokens(texts: list[str]) -> int:
        n = sum(len(t.split()) for t in texts) + 3
        if n > 50_000:
            raise ApiError(400, f"prompt of {n} tokens exceeds the context of 50000")
        return n

    @app.middleware("http")
    async def request_id(request: Request, call_next: Any) -> Response:
        resp: Response = await call_next(request)
        resp.headers["x-request-id"] = request.headers.get("x-request-id", "req_fake")
        return resp

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "test"}]}

    # Chat Completions ---------------------------------------------------------------------------

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        try:
            body = await read_body("chat", request)
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise ApiError(400, "messages must be a non-empty list")
            pending: set[str] = set()
            texts = []
            for m in msgs:
                if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool", "developer"):
                    raise ApiError(400, "invalid message role")
                if m["role"] == "tool":
                    if m.get("tool_call_id") not in pending:
                        raise ApiError(400, "tool message without a preceding tool call")
                    pending.discard(m["tool_call_id"])
                for tc in m.get("tool_calls") or []:
                    pending.add(tc.get("id"))
                texts.append(text_of(m.get("content")))
            tools = body.get("tools") or []
            for tool in tools:
                if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", str((tool.get("function") or {}).get("name", ""))):
                    raise ApiError(400, "invalid tool name")
            stop = body.get("stop") or []
            stops = [stop] if isinstance(stop, str) else list(stop)
            if len(stops) > 16:
                raise ApiError(400, "at most 16 stop strings")
            if body.get("top_logprobs") is not None and not body.get("logprobs"):
                raise ApiError(400, "top_logprobs requires logprobs")
            rf = body.get("response_format") or {}
            json_doc = None
            if rf.get("type") == "json_schema":
                schema = (rf.get("json_schema") or {}).get("schema")
                if not isinstance(schema, dict):
                    raise ApiError(400, "json_schema.schema is required")
                json_doc = instance_of(schema)
            elif rf.get("type") == "json_object":
                json_doc = {"answer": "ok"}
            ptoks = prompt_tokens(texts)
        except ApiError as exc:
            return error("chat", exc)
        choice = body.get("tool_choice", "auto")
        tool = None
        if tools and choice != "none" and (choice == "required" or isinstance(choice, dict)):
            name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else tools[0]["function"]["name"]
            fn = next(t["function"] for t in tools if t["function"]["name"] == name)
            tool = {"name": name, "arguments": orjson.dumps(instance_of(fn.get("parameters") or {"type": "object"})).decode()}
        n = int(body.get("n", 1))
        gens = [Generation(body.get("max_tokens", 16), stops, tool, json_doc, "stop_leaked" in faults) for _ in range(n)]
        cid, created = f"chatcmpl-{next(_ids)}", int(time.time())
        if body.get("stream") and "json_for_stream" not in faults:
            return StreamingResponse(chat_stream(body, gens, cid, created, ptoks), media_type="text/event-stream")
        choices = []
        for i, g in enumerate(gens):
            msg: dict[str, Any] = {"role": "assistant", "content": g.text, "refusal": None}
            if g.tool:
                msg["content"] = None
                msg["tool_calls"] = [{"id": "call_1", "type": "function", "function": g.tool}]
            lp = None
            if body.get("logprobs"):
                k = body.get("top_logprobs") or 0
                lp = {"content": [{"token": w, "logprob": -0.5, "bytes": list(w.encode()),
                                   "top_logprobs": [{"token": w, "logprob": -0.5, "bytes": list(w.encode())}] * k} for w in g.pieces],
                      "refusal": None}
            reason = "tool_calls" if g.tool else g.finish
            choices.append({"index": i, "message": msg, "logprobs": lp, "finish_reason": reason})
        ctoks = sum(max(1, len(g.pieces)) for g in gens)
        return JSONResponse({
            "id": cid, "object": "chat.completion", "created": created, "model": MODEL, "choices": choices,
            "usage": {"prompt_tokens": ptoks, "completion_tokens": ctoks, "total_tokens": ptoks + ctoks,
                      "prompt_tokens_details": {"cached_tokens": 0}},
        })

    def chat_stream(body: dict[str, Any], gens: list[Generation], cid: str, created: int, ptoks: int) -> Iterator[bytes]:
        usage_on = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(choices: list[dict[str, Any]], usage: Any = None) -> bytes:
            c: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL, "choices": choices}
            if usage_on:
                c["usage"] = usage
            return sse(c)

        for i, g in enumerate(gens):
            yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
            for piece in g.pieces:
                yield chunk([{"index": i, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}])
            if g.tool:
                args = g.tool["arguments"]
                frags = [args[j : j + 5] for j in range(0, len(args), 5)]
                for j, frag in enumerate(["", *frags]):
                    tc: dict[str, Any] = {"index": 0, "function": {"arguments": frag}}
                    if j == 0 or "repeated_tool_ids" in faults:
                        tc.update(id="call_1", type="function")
                        tc["function"]["name"] = g.tool["name"]
                    if "missing_index" in faults:
                        del tc["index"]
                    yield chunk([{"index": i, "delta": {"tool_calls": [tc]}, "logprobs": None, "finish_reason": None}])
            reason = "tool_calls" if g.tool else g.finish
            yield chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": reason}])
        if usage_on:
            ctoks = sum(max(1, len(g.pieces)) for g in gens)
            yield chunk([], {"prompt_tokens": ptoks, "completion_tokens": ctoks, "total_tokens": ptoks + ctoks})
        yield b"data: [DONE]\n\n"

    # Messages -----------------------------------------------------------------------------------

    async def messages_prompt(request: Request) -> tuple[dict[str, Any], int]:
        body = await read_body("messages", request)
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise ApiError(400, "messages: at least one message is required")
        texts = [text_of(body.get("system"))]
        pending: set[str] = set()
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                raise ApiError(400, f"messages.{i}: invalid role")
            content = m.get("content")
            if m["role"] == "assistant" and content == []:
                raise ApiError(400, f"messages.{i}: all messages must have non-empty content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": text_of(content)}]
            results = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if pending - results:
                raise ApiError(400, f"messages.{i}: tool_use ids without tool_result: {sorted(pending - results)}")
            pending = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
            texts.append(" ".join(str(b.get("text", "")) for b in blocks))
        return body, prompt_tokens(texts)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        try:
            _, ptoks = await messages_prompt(request)
        except ApiError as exc:
            return error("messages", exc)
        return JSONResponse({"input_tokens": ptoks})

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        try:
            body, ptoks = await messages_prompt(request)
        except ApiError as exc:
            return error("messages", exc)
        tools = body.get("tools") or []
        choice = body.get("tool_choice") or {}
        tool = None
        if tools and choice.get("type") in ("tool", "any"):
            name = choice.get("name") or tools[0]["name"]
            spec = next(t for t in tools if t["name"] == name)
            tool = {"name": name, "input": instance_of(spec.get("input_schema") or {"type": "object"})}
        g = Generation(body.get("max_tokens", 16), list(body.get("stop_sequences") or []), tool, None, "stop_leaked" in faults)
        reason = {"tool": "tool_use", "length": "max_tokens"}.get(g.finish, "stop_sequence" if g.stop_sequence else "end_turn")
        mid, ctoks = f"msg_{next(_ids)}", max(1, len(g.pieces))
        usage = {"input_tokens": ptoks, "output_tokens": ctoks, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if body.get("stream"):
            return StreamingResponse(messages_stream(g, mid, reason, usage), media_type="text/event-stream")
        content: list[dict[str, Any]] = [{"type": "text", "text": g.text}] if not g.tool else [
            {"type": "tool_use", "id": "toolu_1", "name": g.tool["name"], "input": g.tool["input"]}]
        return JSONResponse({"id": mid, "type": "message", "role": "assistant", "model": MODEL, "content": content,
                             "stop_reason": reason, "stop_sequence": g.stop_sequence, "usage": usage})

    def messages_stream(g: Generation, mid: str, reason: str, usage: dict[str, Any]) -> Iterator[bytes]:
        def ev(data: dict[str, Any]) -> bytes:
            return sse(data, None if "missing_event_lines" in faults else data["type"])

        yield ev({"type": "message_start", "message": {"id": mid, "type": "message", "role": "assistant", "model": MODEL,
                                                       "content": [], "stop_reason": None, "stop_sequence": None,
                                                       "usage": {**usage, "output_tokens": 1}}})
        if g.tool:
            yield ev({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": g.tool["name"], "input": {}}})
            args = orjson.dumps(g.tool["input"]).decode()
            for j in range(0, len(args), 5):
                yield ev({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": args[j : j + 5]}})
        else:
            yield ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            yield ev({"type": "ping"})
            for piece in g.pieces:
                yield ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})
        yield ev({"type": "content_block_stop", "index": 0})
        delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": g.stop_sequence}}
        if "usage_missing" not in faults:
            delta["usage"] = {"output_tokens": usage["output_tokens"]}
        yield ev(delta)
        yield ev({"type": "message_stop"})

    # Responses ----------------------------------------------------------------------------------

    @app.get("/v1/responses/{rid}")
    def get_response(rid: str, request: Request) -> Response:
        try:
            check_auth("responses", request)
            if rid not in stored:
                raise ApiError(404, f"response {rid} not found")
        except ApiError as exc:
            return error("responses", exc)
        return JSONResponse(stored[rid])

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        try:
            body = await read_body("responses", request)
            inp = body.get("input")
            if inp == [] or inp is None:
                raise ApiError(400, "input must not be empty")
            texts, calls = [], set()
            for item in inp if isinstance(inp, list) else [{"content": inp}]:
                if item.get("type") == "function_call":
                    calls.add(item.get("call_id"))
                elif item.get("type") == "function_call_output" and item.get("call_id") not in calls:
                    raise ApiError(400, f"No tool call found for tool output with call_id {item.get('call_id')}.")
                texts.append(text_of(item.get("content")))
            prev = body.get("previous_response_id")
            if prev is not None and prev not in stored:
                raise ApiError(404, f"previous response {prev} not found")
            fmt = (body.get("text") or {}).get("format") or {}
            json_doc = instance_of(fmt["schema"]) if fmt.get("type") == "json_schema" else None
            ptoks = prompt_tokens(texts)
        except ApiError as exc:
            return error("responses", exc)
        tools = body.get("tools") or []
        choice = body.get("tool_choice")
        tool = None
        if tools and isinstance(choice, dict):
            spec = next(t for t in tools if t["name"] == choice.get("name"))
            tool = {"name": spec["name"], "arguments": orjson.dumps(instance_of(spec.get("parameters") or {"type": "object"})).decode()}
        g = Generation(body.get("max_output_tokens", 16), [], tool, json_doc, False)
        rid = f"resp_{next(_ids)}"
        ctoks = max(1, len(g.pieces))
        if g.tool:
            item: dict[str, Any] = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", **g.tool}
        else:
            item = {"id": f"msg_{rid}", "type": "message", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": g.text, "annotations": [], "logprobs": []}]}
        incomplete = g.finish == "length"
        resp = {
            "id": rid, "object": "response", "created_at": int(time.time()), "status": "incomplete" if incomplete else "completed",
            "error": None, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"), "model": MODEL, "tools": tools, "output": [item],
            "parallel_tool_calls": True, "metadata": {}, "tool_choice": choice or "auto", "temperature": 1.0, "top_p": 1.0,
            "usage": {"input_tokens": ptoks, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": ctoks,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": ptoks + ctoks},
        }
        if body.get("store", True):
            stored[rid] = resp
        if body.get("stream"):
            return StreamingResponse(responses_stream(resp, g), media_type="text/event-stream")
        return JSONResponse(resp)

    def responses_stream(resp: dict[str, Any], g: Generation) -> Iterator[bytes]:
        seq = itertools.count()

        def ev(data: dict[str, Any]) -> bytes:
            data = {**data, "sequence_number": next(seq)}
            return sse(data, data["type"])

        start = {**resp, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
        yield ev({"type": "response.created", "response": start})
        yield ev({"type": "response.in_progress", "response": start})
        item = resp["output"][0]
        if g.tool:
            yield ev({"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress", "arguments": ""}})
            args = item["arguments"]
            for j in range(0, len(args), 5):
                yield ev({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": 0, "delta": args[j : j + 5]})
            yield ev({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": 0, "arguments": args, "name": item["name"]})
        else:
            yield ev({"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress", "content": []}})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield ev({"type": "response.content_part.added", "item_id": item["id"], "output_index": 0, "content_index": 0, "part": part})
            for piece in g.pieces:
                yield ev({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0, "content_index": 0, "delta": piece, "logprobs": []})
            yield ev({"type": "response.output_text.done", "item_id": item["id"], "output_index": 0, "content_index": 0, "text": g.text, "logprobs": []})
            yield ev({"type": "response.content_part.done", "item_id": item["id"], "output_index": 0, "content_index": 0, "part": {**part, "text": g.text}})
        yield ev({"type": "response.output_item.done", "output_index": 0, "item": item})
        terminal = "response.incomplete" if resp["status"] == "incomplete" else "response.completed"
        yield ev({"type": terminal, "response": resp})

    return app


class ServerThread:
    """Runs an ASGI app with uvicorn on a free loopback port in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
