"""The server's memo of compiled output constraints (`server/constraint_memo.py`): never-repeating
constraints do not stay (before, the pipeline kept the last 64 of them whatever their size, and the
compiler's own cache up to 256 MiB more: the echo fuzz grew RSS with every distinct schema), entries are
bounded in bytes, a repeated constraint is served from the memo, and a memoized constraint masks exactly
as a fresh compile does (`--constraint-memo-mib 0`, the off switch)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, echo_model_card
from recipe.server.config import ServerConfig
from recipe.server.constraint_memo import ConstraintMemo
from starlette.testclient import TestClient


@dataclass
class _Compiled:
    size_bytes: int


def test_a_key_is_kept_only_from_its_second_time() -> None:
    memo = ConstraintMemo(1 << 20)
    assert not memo.put("a", _Compiled(100), 10) and memo.get("a") is None and len(memo) == 0
    assert memo.put("a", _Compiled(100), 10) and memo.get("a") == _Compiled(100)
    assert memo.size_bytes == 110 and memo.hits == 1


def test_the_memo_is_bounded_in_bytes_and_drops_the_least_recently_used() -> None:
    memo = ConstraintMemo(1000)
    for key in range(20):  # each asked for twice, 300 bytes each: at most 3 fit
        memo.put(key, _Compiled(290), 10)
        memo.put(key, _Compiled(290), 10)
        assert memo.size_bytes <= 1000
    assert len(memo) == 3 and [k in memo for k in (17, 18, 19)] == [True] * 3
    memo.put("big", _Compiled(2000), 0)
    assert not memo.put("big", _Compiled(2000), 0) and "big" not in memo  # larger than the whole memo


def test_the_seen_once_record_is_bounded() -> None:
    memo = ConstraintMemo(1 << 20, seen_keys=10)
    for key in range(1000):
        memo.put(key, _Compiled(1), 0)
    assert len(memo._seen) == 10 and len(memo) == 0
    assert not memo.put(0, _Compiled(1), 0)  # forgotten: seen once again, not stored


def test_capacity_zero_is_off() -> None:
    memo = ConstraintMemo(0)
    for _ in range(3):
        assert not memo.put("a", _Compiled(1), 0)
    assert memo.get("a") is None and len(memo._seen) == 0
    with pytest.raises(ValueError):
        ConstraintMemo(-1)
    with pytest.raises(ValueError):
        ServerConfig(constraint_memo_bytes=-1)


def _schema(i: int, description_chars: int = 0) -> dict[str, Any]:
    return {"type": "object", "properties": {f"field_{i}": {"type": "integer", "description": "d" * description_chars}},
            "required": [f"field_{i}"]}


def _chat(schema: dict[str, Any]) -> dict[str, Any]:
    return {"model": "echo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}


def _app(memo_bytes: int) -> TestClient:
    backend = EchoBackend(model=echo_model_card("echo", context_length=131072))
    config = ServerConfig(served_model_names=("echo",), constraint_memo_bytes=memo_bytes)
    return TestClient(create_app(config, backend), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return _app(2 * 1024 * 1024)


def test_never_repeating_constraints_are_not_kept(client: TestClient) -> None:
    memo = client.app.state.recipe.pipeline.constraint_memo  # type: ignore[attr-defined]
    memo.clear()
    for i in range(40):
        assert client.post("/v1/chat/completions", json=_chat(_schema(1000 + i))).status_code == 200
    assert len(memo) == 0 and memo.size_bytes == 0


def test_repeated_constraints_are_kept_within_the_bytes_bound(client: TestClient) -> None:
    memo = client.app.state.recipe.pipeline.constraint_memo  # type: ignore[attr-defined]
    memo.clear()
    for i in range(12):  # each ~50 KB of schema text, asked for twice: more than 2 MiB in all, were all kept
        for _ in range(2):
            assert client.post("/v1/chat/completions", json=_chat(_schema(i, 50_000))).status_code == 200
        assert memo.size_bytes <= memo.capacity_bytes
    assert 0 < len(memo) < 12
    hits = memo.hits
    assert client.post("/v1/chat/completions", json=_chat(_schema(11, 50_000))).status_code == 200
    assert memo.hits == hits + 1


def _masks(compiled: Any, token_ids: list[int]) -> list[bytes]:
    matcher = compiled.matcher()
    out = compiled.allocate_bitmask()
    masks = []
    for t in token_ids:
        matcher.fill_bitmask(out)
        masks.append(np.asarray(out).tobytes())
        if not matcher.accept(t):
            break
    matcher.fill_bitmask(out)
    masks.append(np.asarray(out).tobytes())
    return masks


def test_a_memoized_constraint_masks_as_a_fresh_compile() -> None:
    body = _chat(_schema(7))
    with _app(8 * 1024 * 1024) as on, _app(0) as off:
        compiled = {}
        for name, c in (("on", on), ("off", off)):
            pipeline = c.app.state.recipe.pipeline  # type: ignore[attr-defined]
            request = pipeline.convert("chat", json.dumps(body).encode())
            got = [c.portal.call(pipeline.compile_constraint, request) for _ in range(3)]  # type: ignore[union-attr]
            assert (got[1] is got[2]) == (name == "on") and got[0] is not got[1]
            compiled[name] = got[2]
        tokenizer = on.app.state.recipe.backend.model.tokenizer  # type: ignore[attr-defined]
        ids = tokenizer.encode_plain('{"field_7": 123}')
        assert _masks(compiled["on"], ids) == _masks(compiled["off"], ids)
        assert len(_masks(compiled["on"], ids)) == len(ids) + 1


def test_serve_flag() -> None:
    from recipe.server.cli_serve import config_from_args

    from recipe.cli import build_parser

    parser = build_parser()
    assert config_from_args(parser.parse_args(["serve"])).constraint_memo_bytes == 64 * 1024 * 1024
    assert config_from_args(parser.parse_args(["serve", "--constraint-memo-mib", "0"])).constraint_memo_bytes == 0

