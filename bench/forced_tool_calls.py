"""Forced tool calls that arrive whole: `recipe serve` on the demo model with `--close-within-limit` on and off.

Each request forces one named tool (Chat Completions, `tool_choice` naming it) with one of six argument schemas
of the shapes real clients send (a bare object, pydantic-style with titles, nested, arrays, enums, open
objects), a fresh generated prompt, a temperature of 0 or 1 and a small `max_completion_tokens`. A request
counts as complete when it finishes with `tool_calls` and its arguments validate against the schema the
client sent (`jsonschema`). Both servers get the same requests, in the same order, in the same process.

    .venv/bin/python bench/forced_tool_calls.py --requests 36
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import threading
import time
from typing import Any

import jsonschema
import openai
import uvicorn

MODEL = "SmolLM2-135M-Instruct"
SCHEMAS: dict[str, dict[str, Any]] = {
    "bare": {"type": "object", "properties": {"query": {"type": "string"}}},
    "pydantic": {"title": "Note", "type": "object", "required": ["title", "body"], "properties": {
        "title": {"title": "Title", "type": "string"}, "body": {"title": "Body", "type": "string"}}},
    "nested": {"type": "object", "required": ["place"], "properties": {"place": {
        "type": "object", "required": ["city", "country"],
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}}}}},
    "arrays": {"type": "object", "required": ["items"], "properties": {
        "items": {"type": "array", "items": {"type": "string"}, "minItems": 1}}},
    "enum": {"type": "object", "required": ["unit", "city"], "properties": {
        "unit": {"enum": ["celsius", "fahrenheit"]}, "city": {"type": "string"}}},
    "open": {"type": "object", "required": ["path"], "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}, "additionalProperties": True},
}
TOPICS = ["Rome", "rivers", "a recipe", "the moon", "databases", "a trip", "music", "chess", "tea", "volcanoes"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, close: bool, threads: int | None) -> None:
        from recipe.engine import AsyncLLM
        from recipe.server.app import create_app
        from recipe.server.config import ServerConfig
        from recipe.server.engine_backend import EngineBackend

        kwargs = {"num_threads": threads} if threads else {}
        backend = EngineBackend(AsyncLLM("smollm2", max_num_seqs=4, **kwargs), name=MODEL)
        app = create_app(ServerConfig(close_within_limit=close, allow_unauthenticated=True), backend)
        self.port = _port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> openai.OpenAI:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="unused", max_retries=0,
                             timeout=600)

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


def requests(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        name = list(SCHEMAS)[i % len(SCHEMAS)]
        topic = rng.choice(TOPICS)
        words = " ".join(rng.choice(["long", "detailed", "thorough", "careful", "complete"]) for _ in range(3))
        out.append({"schema": name, "max_tokens": rng.choice([48, 96, 160]), "temperature": rng.choice([0.0, 1.0]),
                    "seed": rng.randrange(2**31),
                    "prompt": f"Request {seed}-{i}: write a {words} answer about {topic} using the tool."})
    return out


def run(client: openai.OpenAI, reqs: list[dict[str, Any]]) -> list[bool]:
    done = []
    for r in reqs:
        schema = SCHEMAS[r["schema"]]
        tool = {"type": "function", "function": {"name": "act", "parameters": schema}}
        resp = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": r["prompt"]}], tools=[tool],  # type: ignore[list-item]
            tool_choice={"type": "function", "function": {"name": "act"}}, max_completion_tokens=r["max_tokens"],
            temperature=r["temperature"], seed=r["seed"])
        choice = resp.choices[0]
        ok = choice.finish_reason == "tool_calls" and bool(choice.message.tool_calls)
        if ok:
            try:
                jsonschema.validate(json.loads(choice.message.tool_calls[0].function.arguments), schema)  # type: ignore[index, union-attr]
            except (ValueError, jsonschema.ValidationError):
                ok = False
        done.append(ok)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=36)
    ap.add_argument("--seed", type=int, default=None, help="prompt seed (default: a fresh one)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    reqs = requests(args.requests, seed)
    results = {}
    for close in (False, True):
        with _Server(close, args.threads) as client:
            t0 = time.perf_counter()
            results[close] = (run(client, reqs), time.perf_counter() - t0)
    print(f"seed {seed}, {len(reqs)} forced calls, demo model")
    for close, (done, secs) in results.items():
        label = "--close-within-limit" if close else "--no-close-within-limit"
        by_schema = {n: sum(d for d, r in zip(done, reqs, strict=True) if r["schema"] == n) for n in SCHEMAS}
        print(f"  {label:26} complete and valid {sum(done)}/{len(done)} ({secs:.0f} s)  by schema {by_schema}")
    off, on = sum(results[False][0]), sum(results[True][0])
    print(f"  ratio on/off: {on}/{max(off, 1)} = {on / max(off, 1):.2f}x complete calls")


if __name__ == "__main__":
    main()
