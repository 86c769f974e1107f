"""Server overhead in one run: the same load through `recipe serve` and straight to the engine, interleaved.

`--rounds` rounds, each two phases of `--duration` seconds with `--concurrency` streaming clients:
  A. straight to the engine: an `AsyncLLM` in this process gets the prompt ids (tokenized beforehand);
  B. through the server: a `recipe serve` process (same model, threads and KV budget) gets the Chat request
     (HTTP, conversion, prompt rendering and encoding, stream processing, SSE).
The phases alternate (A B A B ...) so drift in machine load hits both alike; each engine is idle while the
other is measured. Every request has a fresh prompt (a new number in it), on both paths alike, so neither
side is served from a prefix cache the other lacks. Figure: server overhead = the server's wall time per
streamed token over the engine's, minus one, over all rounds; also TTFT and ITL p50/p99 of both paths.
`--echo` adds the echo backend's server CPU per token (generation free: what the HTTP layer costs alone).
`--vs-llama-cpp` adds a phase C to each round: llama.cpp (llama-cpp-python, installed by bench/engine_baselines.py)
on the same GGUF with the same threads, one stream, greedy, the same fresh prompts (ids from the server's
/tokenize) and output length; figure: the server's total tokens/s at --concurrency streams over llama.cpp's
single stream. The engine's speed paths are chosen with --weight-format/--attention-backend/--decode-backend/
--norm-backend, given alike to the server and to the in-process engine.

    .venv/bin/python bench/server.py --rounds 3 --duration 10 --concurrency 32 --max-tokens 32 --threads 2
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

PROMPT = "Write one short sentence about the sea, number {n}."


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
    def __init__(self, backend: str, model: str | None, engine_flags: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "recipe.cli", "serve", "--port", str(self.port), "--backend", backend,
               "--responses-db", ":memory:", "--log-level", "warning", "--max-pending", "4096"]
        if model:
            cmd += ["--model", model]
        cmd += list(engine_flags)
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


def record(load: Load, t0: float, last: float | None, n_tokens: int) -> float | None:
    """Count `n_tokens` arriving now; returns the new time of the last token."""
    for _ in range(n_tokens):
        now = time.perf_counter()
        if last is None:
            load.ttft.append(now - t0)
        else:
            load.itl.append(now - last)
        last = now
        load.tokens += 1
    return last


class Prompts:
    """Fresh prompts: request k of the whole run asks about number k (both paths draw from one counter)."""

    def __init__(self) -> None:
        self.k = 0

    def next(self) -> str:
        self.k += 1
        return PROMPT.format(n=self.k)


async def drive_server(base: str, model: str, prompts: Prompts, concurrency: int, duration: float,
                       max_tokens: int) -> Load:
    load = Load()
    stop_at = time.perf_counter() + duration

    async def client(http: httpx.AsyncClient) -> None:
        while time.perf_counter() < stop_at:
            body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": prompts.next()}],
                                 "stream": True, "max_tokens": max_tokens, "temperature": 0,
                                 "ignore_eos": True, "thinking": {"type": "disabled"}})
            t0, last = time.perf_counter(), None
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
                            last = record(load, t0, last, 1)
                load.requests += 1
            except httpx.HTTPError:
                load.errors += 1

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency + 4)) as http:
        t = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        load.elapsed = time.perf_counter() - t
    return load


async def drive_engine(engine: object, tokenize: object, prompts: Prompts, concurrency: int, duration: float,
                       max_tokens: int) -> Load:
    """The same requests straight to the engine: prompt ids are made before the clock starts."""
    from recipe.engine import SamplingParams

    load = Load()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    # Enough fresh prompts for the phase, tokenized by the server exactly as it would render them.
    queue = [tokenize(prompts.next()) for _ in range(concurrency * 16)]  # type: ignore[operator]
    stop_at = time.perf_counter() + duration
    counter = 0

    async def client() -> None:
        nonlocal counter
        while time.perf_counter() < stop_at and queue:
            counter += 1
            ids = queue.pop()
            t0, last = time.perf_counter(), None
            async for out in engine.generate(f"b{counter}", ids, params):  # type: ignore[attr-defined]
                last = record(load, t0, last, len(out.new_token_ids))
            load.requests += 1

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    load.elapsed = time.perf_counter() - t
    return load


def drive_llama_cpp(cpp: object, tokenize: object, prompts: Prompts, duration: float, max_tokens: int) -> Load:
    """One llama.cpp stream for `duration` seconds: fresh prompts one after another, `max_tokens` each."""
    load = Load()
    queue = [tokenize(prompts.next()) for _ in range(64)]  # type: ignore[operator]
    stop_at = time.perf_counter() + duration
    t = time.perf_counter()
    while time.perf_counter() < stop_at and queue:
        first, per = cpp.decode(queue.pop(), max_tokens)  # type: ignore[attr-defined]
        load.ttft.append(first)
        load.itl += [per] * (max_tokens - 1)
        load.tokens += max_tokens
        load.requests += 1
    load.elapsed = time.perf_counter() - t
    return load


def merge(loads: list[Load]) -> Load:
    out = Load()
    for x in loads:
        out.requests += x.requests
        out.errors += x.errors
        out.tokens += x.tokens
        out.ttft += x.ttft
        out.itl += x.itl
        out.elapsed += x.elapsed
    return out


def echo_cpu_per_token(args: argparse.Namespace) -> None:
    echo = Server("echo", None)
    try:
        cpu0 = cpu_seconds(echo.proc.pid)
        load = asyncio.run(drive_server(echo.base, echo.model, Prompts(), args.concurrency, args.duration,
                                        args.max_tokens))
        cpu = cpu_seconds(echo.proc.pid) - cpu0
    finally:
        echo.stop()
    print(load.summary("server + echo backend") + f"; server CPU {cpu / max(1, load.tokens) * 1e6:.0f} us/token")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", default=None, help="model to serve (default: the demo model)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads of each engine (default: all cores)")
    ap.add_argument("--kv-cache-bytes", type=int, default=512 << 20, help="KV memory of each engine")
    ap.add_argument("--echo", action="store_true", help="also measure the echo backend's server CPU per token")
    ap.add_argument("--vs-llama-cpp", action="store_true",
                    help="also run llama.cpp's single stream on the same GGUF each round (phase C)")
    ap.add_argument("--step-threads", default="auto", choices=("auto", "off"),
                    help="the engine's --step-threads, on both sides (default: auto, recipe serve's default)")
    for flag in ("weight-format", "attention-backend", "decode-backend", "norm-backend"):
        ap.add_argument(f"--{flag}", default=None, help=f"the engine's --{flag} (default: the engine's default)")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.echo:
        echo_cpu_per_token(args)

    from recipe.engine import AsyncLLM

    config: dict[str, int | str] = {"kv_cache_bytes": args.kv_cache_bytes, "max_num_seqs": max(64, args.concurrency)}
    flags = ["--kv-cache-bytes", str(args.kv_cache_bytes), "--max-num-seqs", str(config["max_num_seqs"])]
    # the server and the engine alone run the same engine configuration (recipe serve profiles threads by default)
    config["step_threads"] = args.step_threads
    flags += ["--step-threads", args.step_threads]
    if args.threads:
        config["num_threads"] = args.threads
        flags += ["--threads", str(args.threads)]
    for name in ("weight_format", "attention_backend", "decode_backend", "norm_backend"):
        if getattr(args, name):
            config[name] = getattr(args, name)
            flags += ["--" + name.replace("_", "-"), getattr(args, name)]
    cpp = None
    if args.vs_llama_cpp:
        from engine_baselines import LlamaCpp
        from recipe.engine.models.registry import smollm2_path

        if args.model not in (None, "smollm2"):
            raise SystemExit("--vs-llama-cpp runs on the demo model's GGUF only")
        cpp = LlamaCpp(str(smollm2_path()), args.threads or len(os.sched_getaffinity(0)))
    srv = Server("engine", args.model, tuple(flags))
    engine = AsyncLLM(args.model or "smollm2", **config)
    prompts = Prompts()
    tokenizer = httpx.Client(base_url=srv.base, timeout=60)

    def tokenize(text: str) -> list[int]:
        r = tokenizer.post("/tokenize", json={"model": srv.model, "messages": [{"role": "user", "content": text}],
                                              "thinking": {"type": "disabled"}})
        return list(r.json()["tokens"])

    direct: list[Load] = []
    served: list[Load] = []
    single: list[Load] = []
    try:
        # warm-up (not measured): one short phase each
        asyncio.run(drive_engine(engine, tokenize, prompts, args.concurrency, 2.0, args.max_tokens))
        asyncio.run(drive_server(srv.base, srv.model, prompts, args.concurrency, 2.0, args.max_tokens))
        if cpp is not None:
            drive_llama_cpp(cpp, tokenize, prompts, 2.0, args.max_tokens)
        rss0 = rss_mib(srv.proc.pid)
        for _ in range(args.rounds):
            direct.append(asyncio.run(drive_engine(engine, tokenize, prompts, args.concurrency, args.duration,
                                                   args.max_tokens)))
            served.append(asyncio.run(drive_server(srv.base, srv.model, prompts, args.concurrency, args.duration,
                                                   args.max_tokens)))
            if cpp is not None:
                single.append(drive_llama_cpp(cpp, tokenize, prompts, args.duration, args.max_tokens))
        rss1 = rss_mib(srv.proc.pid)
    finally:
        tokenizer.close()
        srv.stop()
        asyncio.run(engine.shutdown())
    a, b = merge(direct), merge(served)
    print(a.summary("engine alone   "))
    print(b.summary("server + engine") + f"; server RSS {rss0:.0f} -> {rss1:.0f} MiB")
    per_a, per_b = a.elapsed / max(1, a.tokens), b.elapsed / max(1, b.tokens)
    rounds = ", ".join(f"{(sb.elapsed / max(1, sb.tokens)) / (sa.elapsed / max(1, sa.tokens)) - 1:+.1%}"
                       for sa, sb in zip(direct, served, strict=True))
    print(f"server overhead at {args.concurrency} streams, {args.rounds} interleaved rounds: "
          f"{(per_b / per_a - 1) * 100:+.2f}% wall time per token through the server "
          f"({per_b * 1e3:.3f} ms vs {per_a * 1e3:.3f} ms straight to the engine); per round: {rounds}")
    if single:
        c = merge(single)
        print(c.summary("llama.cpp, 1 stream"))
        print(f"server at {args.concurrency} streams vs llama.cpp's single stream (same GGUF, threads, prompts and "
              f"output length): {(b.tokens / b.elapsed) / (c.tokens / c.elapsed):.2f}x total tokens/s")
    return 1 if (a.errors or b.errors) else 0


if __name__ == "__main__":
    sys.exit(main())
