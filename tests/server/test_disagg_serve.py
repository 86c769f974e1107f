"""`recipe serve --prefill-workers 1 --decode-workers 1`: the same HTTP answers as the embedded engine, through
the protocol layer unchanged: stop strings (matched by the server over the routed stream), n > 1, a JSON
schema constraint (recompiled in each worker from its recipe), streaming; /health and /metrics of the router."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
from pathlib import Path

import httpx
import pytest

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


@pytest.fixture(scope="module")
def chat_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("disagg_chat")
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tok.save(str(path / "tokenizer.json"))
    torch.manual_seed(3)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=258, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False, bos_token_id=256,
        eos_token_id=257))
    model.save_pretrained(path)
    return path


def args_for(path: Path, **extra: object) -> argparse.Namespace:
    from recipe.server import cli_serve

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_serve.add_parser(sub)
    argv = ["serve", "--model", str(path), "--threads", "1", "--kv-cache-bytes", str(8 << 20), "--served-model-name", "tiny"]
    for k, v in extra.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return parser.parse_args(argv)


def ask(base: str, body: dict) -> dict:  # type: ignore[type-arg]
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def stream_text(base: str, body: dict) -> str:  # type: ignore[type-arg]
    text = []
    with httpx.stream("POST", f"{base}/v1/chat/completions", json={**body, "stream": True}, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:]).get("choices", []):
                    text.append(c.get("delta", {}).get("content") or "")
    return "".join(text)


def answers(base: str, stop: str | None) -> list[object]:
    msgs = [{"role": "user", "content": "Say something."}]
    plain = {"model": "tiny", "messages": msgs, "max_tokens": 24, "temperature": 0, "n": 2}
    out: list[object] = [[(c["message"]["content"], c["finish_reason"]) for c in ask(base, plain)["choices"]]]
    if stop is not None:
        stopped = ask(base, {**plain, "stop": [stop]})
        out.append([(c["message"]["content"], c["finish_reason"]) for c in stopped["choices"]])
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}
    constrained = ask(base, {**plain, "n": 1, "max_tokens": 40, "response_format": fmt})["choices"][0]
    out.append((constrained["message"]["content"], constrained["finish_reason"]))
    out.append(stream_text(base, {**plain, "n": 1}))
    return out


def test_disaggregated_server_answers_as_the_embedded_engine(chat_checkpoint: Path, serve) -> None:  # type: ignore[no-untyped-def]
    from recipe.server.app import create_app
    from recipe.server.cli_serve import build_backend
    from recipe.server.config import ServerConfig

    config = ServerConfig(api_keys=(), responses_db=":memory:", served_model_names=("tiny",))
    colocated = build_backend(args_for(chat_checkpoint))
    try:
        with serve(create_app(config, colocated)) as srv:
            first = ask(srv.base, {"model": "tiny", "messages": [{"role": "user", "content": "Say something."}],
                                   "max_tokens": 24, "temperature": 0})["choices"][0]["message"]["content"]
            stop = first[3:5] if len(first) >= 5 else None
            want = answers(srv.base, stop)
    finally:
        done = colocated.shutdown()
        if inspect.iscoroutine(done):
            asyncio.run(done)
    backend = build_backend(args_for(chat_checkpoint, prefill_workers=1, decode_workers=1))
    try:
        with serve(create_app(config, backend)) as srv:
            got = answers(srv.base, stop)
            health = httpx.get(f"{srv.base}/health", timeout=30)
            metrics = httpx.get(f"{srv.base}/metrics", timeout=30).text
    finally:
        asyncio.run(backend.shutdown())
    assert got == want
    assert stop is None or want[1] != want[0]  # the stop string cut the output
    json.loads(str(want[-2][0]))  # type: ignore[index]
    assert health.status_code == 200
    assert 'recipe:disagg_workers{model_name="tiny",role="decode",state="ready"} 1.0' in metrics
    assert "recipe:disagg_handoffs_total" in metrics
    for w in backend.engine.workers():  # type: ignore[attr-defined]
        assert not backend.engine._workers[w["id"]].process.is_alive()  # type: ignore[attr-defined]
