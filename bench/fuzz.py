"""Fuzz `recipe serve` with generated hostile bodies for all three APIs and check every answer.

Starts the server as a subprocess (`--backend echo`, or the embedded engine with `--backend engine`),
sends `--per-api` cases per API from `fuzz_bodies.CaseMaker` (schema-drawn, corpus mutations, broken JSON
text), and checks each answer with `check_answer`: the API's error shape or a valid response, never a 5xx
or a stack trace. Afterwards `/health` must answer, the server log must hold no traceback, and the
server's RSS, read after `--settle` idle seconds, must be within 10% of the start: the RSS read the same way
(after `--settle` idle seconds) once a warm-up of one valid request per API and constraint kind has loaded
what every server loads once (the constraint compiler and the tokenizer's constraint index). The cold RSS,
before that warm-up, is reported too.

    .venv/bin/python bench/fuzz.py --per-api 10000                       # echo backend
    .venv/bin/python bench/fuzz.py --backend engine --per-api 334        # the SmolLM2 demo engine
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_bodies import APIS, CaseMaker, check_answer, load_seeds
from recipe.server.openapi_bodies import request_body_schemas


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(backend: str, port: int, log: Path, db: Path, kv_cache_bytes: int,
                 server_args: list[str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "recipe.cli", "serve", "--port", str(port), "--responses-db", str(db),
           "--log-level", "warning", "--backend", backend, *server_args]
    if backend == "echo":
        cmd += ["--served-model-name", "echo", "--max-model-len", "4096"]
    else:
        cmd += ["--served-model-name", "echo", "--max-model-len", "512", "--threads", "1",
                "--kv-cache-bytes", str(kv_cache_bytes)]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited while starting")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("the server did not come up")


WARMUP_SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
WARMUP_MESSAGES = [{"role": "user", "content": "hi"}]
WARMUP_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": WARMUP_MESSAGES, "max_tokens": 4}),
    ("/v1/chat/completions", {"messages": WARMUP_MESSAGES, "max_tokens": 4, "response_format": {
        "type": "json_schema", "json_schema": {"name": "a", "schema": WARMUP_SCHEMA}}}),
    ("/v1/chat/completions", {"messages": WARMUP_MESSAGES, "max_tokens": 4, "tool_choice": "auto", "tools": [
        {"type": "function", "function": {"name": "f", "parameters": WARMUP_SCHEMA}}]}),
    ("/v1/chat/completions", {"messages": WARMUP_MESSAGES, "max_tokens": 4,
                              "response_format": {"type": "regex", "regex": "a+"}}),
    ("/v1/messages", {"messages": WARMUP_MESSAGES, "max_tokens": 4}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 16}),
]


def warm_up(client: httpx.Client, model: str) -> list[int]:
    """One valid request per API and constraint kind (what every server loads once); their statuses. Each is
    tried up to three times: on a loaded machine the first constraint compile, which builds the tokenizer's
    index, can outlast the server's compile budget (a 400) while the index is still being built."""
    statuses = []
    for path, body in WARMUP_BODIES:
        for _ in range(3):
            status = client.post(path, json={"model": model, **body}, headers={"anthropic-version": "2023-06-01"}).status_code
            if status == 200:
                break
        statuses.append(status)
    return statuses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("echo", "engine"), default="echo")
    ap.add_argument("--per-api", type=int, default=10_000, help="cases per API")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=120.0, help="per-request client timeout (s)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop early after this long (the summary says how many were sent)")
    ap.add_argument("--json", default=None, help="also write the summary here")
    ap.add_argument("--settle", type=float, default=40.0,
                    help="seconds to leave the server idle before the final RSS reading (its heap trimmer runs "
                         "every 30 s after activity)")
    ap.add_argument("--kv-cache-bytes", type=int, default=512 << 20,
                    help="the engine's KV cache (default 512 MiB: the engine's own default takes a share of free "
                         "memory, too much on a shared machine)")
    ap.add_argument("--max-tokens-cap", type=int, default=None,
                    help="bring every valid generation length down to at most this (default: 16 with the engine)")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="pass ARG on to `recipe serve` (repeatable), e.g. --server-arg=--malloc-arena-max=0")
    args = ap.parse_args()

    cap = args.max_tokens_cap if args.max_tokens_cap is not None else (16 if args.backend == "engine" else None)
    maker = CaseMaker(request_body_schemas(), load_seeds(), "echo", max_tokens_cap=cap)
    rnd = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="recipe-fuzz-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(args.backend, port, tmp / "server.log", tmp / "responses.sqlite3", args.kv_cache_bytes,
                        args.server_arg)
    problems: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    statuses: collections.Counter[int] = collections.Counter()
    hows: collections.Counter[str] = collections.Counter()
    sent = 0
    warm_rss = cold_rss = last_rss = 0
    warm_statuses: list[int] = []
    try:
        wait_healthy(base, proc)
        cold_rss = rss_kib(proc.pid)
        with httpx.Client(base_url=base, timeout=max(args.timeout, 300)) as client:
            warm_statuses = warm_up(client, "echo")
        time.sleep(args.settle)
        warm_rss = rss_kib(proc.pid)
        print(f"RSS cold {cold_rss // 1024} MiB, after warm-up and {args.settle:g} s idle {warm_rss // 1024} MiB "
              f"(warm-up statuses {warm_statuses})", flush=True)
        t0 = time.time()
        with httpx.Client(base_url=base, timeout=args.timeout) as client:
            for i in range(args.per_api * len(APIS)):
                if args.max_seconds is not None and time.time() - t0 > args.max_seconds:
                    print(f"stopping at {sent} requests: --max-seconds reached", flush=True)
                    break
                case = maker.case(APIS[i % len(APIS)], rnd)
                headers = {"content-type": "application/json"}
                if case.api == "messages":
                    headers["anthropic-version"] = "2023-06-01"
                try:
                    r = client.post(case.path, content=case.body, headers=headers)
                    problem = check_answer(case.api, r.status_code, r.headers.get("content-type", ""), r.content)
                    statuses[r.status_code] += 1
                except httpx.HTTPError as exc:
                    problem = f"transport error {type(exc).__name__}"
                sent += 1
                hows[case.how.split("_")[0]] += 1
                if problem:
                    problems[problem] += 1
                    if problem not in examples:
                        examples[problem] = f"{case.api} {case.how}: {case.body[:300]!r}"
                        print(f"case {sent}: {problem}: {examples[problem]}", flush=True)
                if sent % 1000 == 0:
                    print(f"{sent} sent, {sum(problems.values())} problems, {time.time() - t0:.0f} s, "
                          f"RSS {rss_kib(proc.pid) // 1024} MiB", flush=True)
            healthy = client.get("/health").status_code == 200
            last_rss = rss_kib(proc.pid)
            time.sleep(args.settle)
            healthy = healthy and client.get("/health").status_code == 200
        end_rss = rss_kib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = (tmp / "server.log").read_text(errors="replace")
    summary = {
        "backend": args.backend, "server_args": args.server_arg, "max_tokens_cap": cap, "requests": sent, "requests_per_api": {a: (sent + 2 - i) // 3 for i, a in enumerate(APIS)}, "per_api": args.per_api, "seconds": round(time.time() - t0, 1),
        "statuses": dict(sorted(statuses.items())), "generators": dict(hows), "problems": dict(problems),
        "examples": examples, "5xx": sum(n for s, n in statuses.items() if s >= 500),
        "tracebacks_in_server_log": log.count("Traceback"), "healthy_after": healthy,
        "warmup_statuses": warm_statuses,
        "rss_mib": {"cold": cold_rss // 1024, f"start_after_warmup_and_{args.settle:g}s_idle": warm_rss // 1024,
                    "after_last_request": last_rss // 1024, f"end_after_{args.settle:g}s_idle": end_rss // 1024},
        "rss_growth_from_start": round(end_rss / warm_rss - 1, 4) if warm_rss else None,
    }
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, ensure_ascii=False))
    ok = (not problems and healthy and summary["tracebacks_in_server_log"] == 0 and warm_statuses == [200] * len(WARMUP_BODIES)
          and summary["rss_growth_from_start"] is not None and summary["rss_growth_from_start"] <= 0.10)
    if not ok and summary["tracebacks_in_server_log"]:
        i = log.index("Traceback")
        print(log[max(0, i - 300): i + 3000], file=sys.stderr)
    os.sync()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
