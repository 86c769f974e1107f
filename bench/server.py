"""Bounded loopback load on `recipe serve`, and the server's own cost per token.

Three phases, each `--duration` seconds with `--concurrency` streaming clients (Chat Completions, SSE):
  1. the server with the instant echo backend (`--backend echo`): what the HTTP layer, conversion, prompt
     encoding, stream processing and SSE cost per token when generation itself is free;
  2. the engine alone (`AsyncLLM` driven in-process with the same prompt ids and max_tokens);
  3. the server with the engine: requests/s, TTFT and inter-token latency p50/p99, errors, server RSS.
Figure: server overhead per token = the echo server's CPU seconds per token (its own process's user+system
time over the tokens it streamed, so the load generator's cost on the same cores is excluded) divided by
the engine's wall time per token at the same concurrency. Goal < 5% at 32 streams.

    .venv/bin/python bench/server.py --duration 20 --concurrency 32 --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx
import orjson

PROMPT = "Write one short sentence about the sea."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


@dataclass
class Load:
    requests: int = 0
    errors: int = 0
    tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    elapsed: float = 0.0

    def summary(self, name: str) -> str:
        tps = self.tokens / self.elapsed if self.elapsed else 0.0
        return (f"{name}: {self.requests} requests ({self.requests / self.elapsed:.2f}/s), {self.errors} errors, "
                f"{tps:.1f} tokens/s; TTFT p50 {pct(self.ttft, .5) * 1e3:.1f} ms p99 {pct(self.ttft, .99) * 1e3:.1f} ms; "
                f"ITL p50 {pct(self.itl, .5) * 1e3:.2f} ms p99 {pct(self.itl, .99) * 1e3:.2f} ms")


class Server:
    def __init__(self, backend: str, model: str | None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "recipe.cli", "serve", "--port", str(self.port), "--backend", backend,
               "--responses-db", ":memory:", "--log-level", "warning", "--max-pending", "4096"]
        if model:
            cmd += ["--model", model]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 300
        while True:
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                out = self.proc.stdout.read() if self.proc.stdout else ""
                raise RuntimeError(f"server did not start:\n{out}")
            time.sleep(0.2)
        self.model = httpx.get(self.base + "/v1/models").json()["data"][0]["id"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


async def drive_server(base: str, model: str, concurrency: int, duration: float, max_tokens: int) -> Load:
    load = Load()
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": PROMPT}], "stream": True,
                         "max_tokens": max_tokens, "temperature": 0, "thinking": {"type": "disabled"}})
    stop_at = time.perf_counter() + duration

    async def client(http: httpx.AsyncClient) -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            last = None
            try:
                async with http.stream("POST", base + "/v1/chat/completions", content=body,
                                       headers={"content-type": "application/json"}) as r:
                    if r.status_code != 200:
                        load.errors += 1
                        await r.aread()
                        continue
                    async for line in r.aiter_lines():
                        if not line.startswith("data: {"):
                            continue
                        chunk = orjson.loads(line[6:])
                        if "error" in chunk:
                            load.errors += 1
                            break
                        if any(c["delta"].get("content") for c in chunk.get("choices", [])):
                            now = time.perf_counter()
                            if last is None:
                                load.ttft.append(now - t0)
                            else:
                                load.itl.append(now - last)
                            last = now
                            load.tokens += 1
                load.requests += 1
            except httpx.HTTPError:
                load.errors += 1

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency + 4)) as http:
        t = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        load.elapsed = time.perf_counter() - t
    return load


async def drive_engine(model: str | None, prompt_ids: list[int], concurrency: int, duration: float,
                       max_tokens: int) -> Load:
    from recipe.engine import AsyncLLM, SamplingParams

    engine = AsyncLLM(model) if model else AsyncLLM()
    load = Load()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop_token_ids=tuple(engine.model_info.eos_token_ids))
    stop_at = time.perf_counter() + duration
    counter = 0

    async def client() -> None:
        nonlocal counter
        while time.perf_counter() < stop_at:
            counter += 1
            t0, last = time.perf_counter(), None
            async for out in engine.generate(f"b{counter}", prompt_ids, params):
                for _ in out.new_token_ids:
                    now = time.perf_counter()
                    if last is None:
                        load.ttft.append(now - t0)
                    else:
                        load.itl.append(now - last)
                    last = now
                    load.tokens += 1
            load.requests += 1

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    load.elapsed = time.perf_counter() - t
    await engine.shutdown()
    return load


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", default=None, help="model for the engine phases (default: the demo model)")
    ap.add_argument("--skip-engine", action="store_true", help="only the echo phase (no model needed)")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    echo = Server("echo", None)
    try:
        cpu0 = cpu_seconds(echo.proc.pid)
        echo_load = asyncio.run(drive_server(echo.base, echo.model, args.concurrency, args.duration, args.max_tokens))
        echo_cpu = cpu_seconds(echo.proc.pid) - cpu0
        echo_rss = rss_mib(echo.proc.pid)
    finally:
        echo.stop()
    server_s_per_token = echo_cpu / max(1, echo_load.tokens)
    print(echo_load.summary("server + echo backend") + f"; server CPU {server_s_per_token * 1e6:.0f} us/token; "
          f"server RSS {echo_rss:.0f} MiB")
    if args.skip_engine:
        return 1 if echo_load.errors else 0

    srv = Server("engine", args.model)
    try:
        ids = httpx.post(srv.base + "/tokenize", json={"model": srv.model, "messages": [
            {"role": "user", "content": PROMPT}], "thinking": {"type": "disabled"}}).json()["tokens"]
        rss0 = rss_mib(srv.proc.pid)
        srv_load = asyncio.run(drive_server(srv.base, srv.model, args.concurrency, args.duration, args.max_tokens))
        rss1 = rss_mib(srv.proc.pid)
    finally:
        srv.stop()
    print(srv_load.summary("server + engine") + f"; server RSS {rss0:.0f} -> {rss1:.0f} MiB")

    alone = asyncio.run(drive_engine(args.model, ids, args.concurrency, args.duration, args.max_tokens))
    print(alone.summary("engine alone"))
    engine_s_per_token = alone.elapsed / max(1, alone.tokens)
    ratio = server_s_per_token / engine_s_per_token
    print(f"server overhead per token at {args.concurrency} streams: {ratio * 100:.2f}% of the engine's time per "
          f"token ({server_s_per_token * 1e3:.3f} ms server CPU vs {engine_s_per_token * 1e3:.3f} ms engine wall); "
          "goal < 5%")
    return 1 if (echo_load.errors or srv_load.errors) else 0


if __name__ == "__main__":
    sys.exit(main())
