"""A DeepSeek-V4 checkpoint served end to end: the engine picks the DeepSeek V4 codec from the checkpoint, and
a chat request with a required tool goes convert -> render -> ids -> V4 engine (a tiny random model,
steered by the tool-call constraint) -> DSML parsing -> an OpenAI response with a tool call."""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine" / "models"))

TOOL = {"type": "function", "function": {
    "name": "set_light", "description": "Switch the light",
    "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"],
                   "additionalProperties": False}}}


def byte_tokenizer(path: Path) -> int:
    """A byte-level tokenizer.json (256 byte tokens, no merges) with the V4 codec's special tokens."""
    from recipe.codecs.deepseek_v4 import SPECIAL_TOKENS
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.save(str(path / "tokenizer.json"))
    return tok.get_vocab_size()


@pytest.fixture(scope="module")
def v4_served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from v4_checkpoints import PATTERNS, V4_TINY, write_v4_checkpoint

    path = tmp_path_factory.mktemp("v4_served")
    vocab = byte_tokenizer(path)
    saved = dict(V4_TINY)
    V4_TINY.update(vocab_size=vocab, bos_token_id=vocab - 17, eos_token_id=vocab - 16, max_position_embeddings=4096)
    try:
        write_v4_checkpoint(path, "mixed")
    finally:
        V4_TINY.clear()
        V4_TINY.update(saved)
    assert "mixed" in PATTERNS
    return path


def test_chat_with_a_required_tool_is_answered_by_a_dsml_tool_call(v4_served_dir: Path, serve) -> None:  # type: ignore[no-untyped-def]
    from recipe.engine import AsyncLLM
    from recipe.server.app import create_app
    from recipe.server.config import ServerConfig
    from recipe.server.engine_backend import EngineBackend

    engine = AsyncLLM(str(v4_served_dir), max_num_seqs=2, block_size=4, num_kv_blocks=512, num_threads=1)
    assert engine.model_info.architecture == "deepseek_v4" and engine.model_info.chat_format == "deepseek_v4"
    backend = EngineBackend(engine, name="tiny-v4")
    app = create_app(ServerConfig(api_keys=(), responses_db=":memory:"), backend)
    body = {"model": "tiny-v4", "messages": [{"role": "user", "content": "Light on, please."}], "tools": [TOOL],
            "tool_choice": "required", "max_tokens": 400, "temperature": 0, "thinking": {"type": "disabled"}}
    try:
        with serve(app) as srv:
            r = httpx.post(f"{srv.base}/v1/chat/completions", json=body, timeout=600)
    finally:
        done = engine.shutdown()
        if inspect.iscoroutine(done):
            asyncio.run(done)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "set_light"
    assert isinstance(json.loads(call["arguments"])["on"], bool)
