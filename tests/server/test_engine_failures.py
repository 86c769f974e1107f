"""The server over a real engine that fails mid-step: streams end with the API's error event, requests get
503, `/health` says unhealthy, and nothing hangs. Also: the engine's own limits and sampling fields reach
the wire. Every HTTP call has a timeout, so a hang fails the test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import torch
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, GenerationDelta, GenerationParams, echo_model_card
from recipe.server.config import ServerConfig

MODEL = "SmolLM2-135M-Instruct"
TIMEOUT = 60.0


class Fault:
    """Arms a failure in the loaded model's forward (instance attribute, so every caller sees it)."""

    def __init__(self, model: Any) -> None:
        self.armed = False
        self.calls = 0
        real = model.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.armed:
                raise RuntimeError("injected device failure")
            return real(*args, **kwargs)

        model.forward = forward


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any]:
    from recipe.engine.models.registry import load_model

    return load_model("smollm2", dtype=torch.float32, device="cpu")  # type: ignore[no-any-return]


def engine_backend(model_and_info: tuple[Any, Any], **config: Any) -> Any:
    from recipe.engine import AsyncLLM
    from recipe.server.engine_backend import EngineBackend

    config = {"num_kv_blocks": 128, "max_num_seqs": 8, "num_threads": 1, **config}
    return EngineBackend(AsyncLLM(model_and_info, **config), name=MODEL)


def chat(stream: bool, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Count from one to one thousand."}],
            "max_tokens": 400, "stream": stream, "ignore_eos": True, **extra}


def test_an_engine_failure_mid_step_gives_error_events_503s_and_unhealthy(smollm2, serve) -> None:  # type: ignore[no-untyped-def]
    model, _info = smollm2
    fault = Fault(model)
    backend = engine_backend(smollm2)
    app = create_app(ServerConfig(), backend)
    with serve(app) as srv, httpx.Client(base_url=srv.base, timeout=TIMEOUT) as client:
        assert client.get("/health").status_code == 200
        streamed: list[str] = []
        first_chunks = threading.Event()
        whole: dict[str, httpx.Response] = {}

        def stream_chat() -> None:
            with client.stream("POST", "/v1/chat/completions", json=chat(True)) as r:
                for line in r.iter_lines():
                    if line:
                        streamed.append(line)
                    if len(streamed) >= 4:
                        first_chunks.set()

        def whole_chat() -> None:
            whole["chat"] = client.post("/v1/chat/completions", json=chat(False))

        threads = [threading.Thread(target=stream_chat), threading.Thread(target=whole_chat)]
        for t in threads:
            t.start()
        assert first_chunks.wait(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while backend.stats().running < 2 and time.monotonic() < deadline:  # both requests are in the engine
            time.sleep(0.005)
        assert backend.stats().running == 2
        fault.armed = True
        for t in threads:
            t.join(TIMEOUT)
            assert not t.is_alive(), "a request hung after the engine failed"
        # the stream in flight ends with the API's mid-stream error event, then [DONE]
        error = orjson.loads(streamed[-2].removeprefix("data: "))
        assert streamed[-1] == "data: [DONE]" and error["error"]["type"] == "server_error"
        assert not any('"finish_reason":"stop"' in line for line in streamed)
        # the request in flight without streaming gets a 503 in OpenAI's shape
        assert whole["chat"].status_code == 503
        assert whole["chat"].json()["error"]["code"] == "service_unavailable"
        # later requests: 503 at once, in each API's shape; /health says unhealthy
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "unhealthy"
        assert client.post("/v1/chat/completions", json=chat(True)).status_code == 503
        r = client.post("/v1/messages", json={"model": MODEL, "max_tokens": 5,
                                              "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded_error"
        r = client.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 5})
        assert r.status_code == 503
    model.__dict__.pop("forward", None)


def test_the_server_advertises_the_engine_max_model_len(smollm2, serve) -> None:  # type: ignore[no-untyped-def]
    backend = engine_backend(smollm2, max_model_len=96)
    assert backend.model.context_length == 96  # not the checkpoint's 8192
    app = create_app(ServerConfig(), backend)
    with serve(app) as srv, httpx.Client(base_url=srv.base, timeout=TIMEOUT) as client:
        models = client.get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
        assert models["data"][0]["max_input_tokens"] == 96
        assert client.post("/tokenize", json={"prompt": "hello"}).json()["max_model_len"] == 96
        long = {"model": MODEL, "messages": [{"role": "user", "content": "word " * 120}], "max_tokens": 4}
        r = client.post("/v1/chat/completions", json=long)
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_vllm_sampling_fields_reach_the_engine(smollm2, serve) -> None:  # type: ignore[no-untyped-def]
    backend = engine_backend(smollm2)
    seen: list[Any] = []
    real_generate = backend.engine.generate

    def recording_generate(request_id: str, prompt_ids: list[int], params: Any) -> Any:
        seen.append(params)
        return real_generate(request_id, prompt_ids, params)

    backend.engine.generate = recording_generate
    app = create_app(ServerConfig(), backend)
    with serve(app) as srv, httpx.Client(base_url=srv.base, timeout=TIMEOUT) as client:
        body = chat(False, max_tokens=6, min_p=0.2, repetition_penalty=1.3, top_k=7)
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] == "length"  # ignore_eos: only max_tokens ends it
        p = seen[-1]
        assert (p.min_p, p.repetition_penalty, p.top_k, p.ignore_eos) == (0.2, 1.3, 7, True)
        assert p.stop_token_ids == ()  # with ignore_eos the end-of-sequence ids do not stop it either
        r = client.post("/v1/chat/completions", json={**chat(False), "ignore_eos": False, "max_tokens": 3})
        assert r.status_code == 200 and seen[-1].ignore_eos is False and seen[-1].stop_token_ids
        for field, value in [("min_p", 2), ("repetition_penalty", 0), ("ignore_eos", "yes"), ("top_k", 1.5)]:
            r = client.post("/v1/chat/completions", json=chat(False, **{field: value}))
            assert r.status_code == 400 and r.json()["error"]["param"] == field, (field, r.text)


class DeadEndEcho(EchoBackend):
    """Echoes two tokens, then reports that the output constraint had no way on."""

    async def generate(self, request_id: str, prompt_ids: Any, params: GenerationParams) -> Iterator[Any]:  # type: ignore[override]
        special = self.model.tokenizer.special_ids
        plain = [t for t in prompt_ids if t not in special][:2]
        yield GenerationDelta(index=0, token_ids=tuple(plain), prompt_tokens=len(prompt_ids))
        yield GenerationDelta(index=0, token_ids=(), prompt_tokens=len(prompt_ids), finished=True,
                              finish_reason="dead_end")


def test_a_constraint_dead_end_is_an_error_never_a_normal_finish(serve) -> None:  # type: ignore[no-untyped-def]
    app = create_app(ServerConfig(), DeadEndEcho(model=echo_model_card("DeepSeek-V4-Pro")))
    body = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 9,
            "thinking": {"type": "disabled"}}
    with serve(app) as srv, httpx.Client(base_url=srv.base, timeout=TIMEOUT) as client:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 500 and "constraint" in r.json()["error"]["message"]
        r = client.post("/v1/chat/completions", json={**body, "stream": True})
        lines = [line for line in r.text.splitlines() if line]
        assert lines[-1] == "data: [DONE]" and '"error"' in lines[-2] and "constraint" in lines[-2]
        assert not any('"finish_reason":"stop"' in line for line in lines)
        r = client.post("/v1/messages", json={**body, "stream": True})
        assert "event: error" in r.text and "message_stop" not in r.text
