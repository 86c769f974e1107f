"""Soak `recipe serve` under a bounded mixed load for a given duration, and watch it for leaks.

Starts the server as a subprocess (the SmolLM2 demo engine by default, or `--backend echo`), then
`--concurrency` client threads send a weighted mix for `--duration` seconds: Chat, Messages and Responses,
streaming and not, tools (`tool_choice` required), JSON-schema and regex constraints, `n=2`, stored
Responses continued with `previous_response_id`, and deliberate client disconnects mid-stream. Every
answer is checked (`fuzz_bodies.check_answer`); a deliberate disconnect is not an error.

Every `--sample-every` seconds it records throughput, p50/p99 latency, the server's RSS, its open file
descriptors and the engine's KV usage. At the end it waits for the engine to go idle and reports the KV
blocks still held (leaked: must be 0), RSS growth after warm-up, and writes `soak.json` and `soak.png`.

    .venv/bin/python bench/soak.py --duration 1800 --out /tmp/soak
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import itertools

from fuzz import free_port, rss_kib, wait_healthy
from fuzz_bodies import check_answer

MODEL = "soak"
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20}}, "required": ["answer"],
          "additionalProperties": False}
WORDS = ["apple", "river", "stone", "cloud", "orange", "music", "paper", "light", "garden", "window", "yellow", "mountain"]


def prompt(rnd: random.Random) -> str:
    return "Say something about " + " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(2, 12))) + "."


def scenario(rnd: random.Random) -> tuple[str, str, dict[str, Any], bool]:
    """(name, path, body, deliberate disconnect)."""
    p = prompt(rnd)
    n_tok = rnd.randint(4, 24)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": p}], "max_tokens": n_tok}
    kind = rnd.choice(["chat", "chat_stream", "chat_n2", "chat_tools", "chat_json", "chat_regex", "messages",
                       "messages_stream", "messages_tools", "responses", "responses_stream", "responses_chain",
                       "responses_json", "disconnect"])
    if kind == "chat":
        return kind, "/v1/chat/completions", chat, False
    if kind == "chat_stream":
        return kind, "/v1/chat/completions", {**chat, "stream": True, "stream_options": {"include_usage": True}}, False
    if kind == "chat_n2":
        return kind, "/v1/chat/completions", {**chat, "n": 2, "stream": rnd.random() < 0.5, "temperature": 0.8}, False
    if kind == "chat_tools":
        return kind, "/v1/chat/completions", {**chat, "tools": TOOLS, "tool_choice": "required", "max_tokens": 48}, False
    if kind == "chat_json":
        fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}
        return kind, "/v1/chat/completions", {**chat, "response_format": fmt, "max_tokens": 32}, False
    if kind == "chat_regex":
        return kind, "/v1/chat/completions", {**chat, "response_format": {"type": "regex", "regex": "(yes|no), [a-z]{1,8}"}}, False
    msgs = {"model": MODEL, "max_tokens": n_tok, "messages": [{"role": "user", "content": p}]}
    if kind == "messages":
        return kind, "/v1/messages", msgs, False
    if kind == "messages_stream":
        return kind, "/v1/messages", {**msgs, "stream": True}, False
    if kind == "messages_tools":
        tools = [{"name": "get_weather", "description": "Weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
        return kind, "/v1/messages", {**msgs, "tools": tools, "tool_choice": {"type": "any"}, "max_tokens": 48}, False
    resp = {"model": MODEL, "input": p, "max_output_tokens": max(n_tok, 16)}
    if kind == "responses":
        return kind, "/v1/responses", resp, False
    if kind == "responses_stream":
        return kind, "/v1/responses", {**resp, "stream": True}, False
    if kind == "responses_json":
        fmt = {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "strict": True}}
        return kind, "/v1/responses", {**resp, "text": fmt, "max_output_tokens": 32}, False
    if kind == "responses_chain":
        return kind, "/v1/responses", resp, False  # the worker continues it with previous_response_id
    which = rnd.choice(["chat", "messages", "responses"])  # a disconnect mid-stream, on any of the three APIs
    if which == "messages":
        return kind, "/v1/messages", {**msgs, "stream": True, "max_tokens": 200}, True
    if which == "responses":
        return kind, "/v1/responses", {**resp, "stream": True, "max_output_tokens": 200}, True
    return kind, "/v1/chat/completions", {**chat, "stream": True, "max_tokens": 200}, True


@dataclass
class Results:
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: list[tuple[float, float, str]] = field(default_factory=list)  # (end time, latency, scenario)
    errors: list[str] = field(default_factory=list)
    disconnects: int = 0

    def add(self, end: float, latency: float, kind: str) -> None:
        with self.lock:
            self.done.append((end, latency, kind))

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


def api_of(path: str) -> str:
    return "messages" if path.startswith("/v1/messages") else "responses" if path.startswith("/v1/responses") else "chat"


def one(client: httpx.Client, rnd: random.Random, res: Results) -> None:
    kind, path, body, disconnect = scenario(rnd)
    headers = {"anthropic-version": "2023-06-01"}
    t = time.time()
    try:
        if disconnect:
            with client.stream("POST", path, json=body, headers=headers) as r:
                for n, _ in enumerate(r.iter_lines()):
                    if n >= 3:
                        break
            with res.lock:
                res.disconnects += 1
            return
        r = client.post(path, json=body, headers=headers)
        problem = check_answer(api_of(path), r.status_code, r.headers.get("content-type", ""), r.content)
        if problem is None and r.status_code != 200:
            problem = f"status {r.status_code}: {r.text[:200]}"
        if problem is None and kind == "responses_chain":
            follow = {"model": MODEL, "input": "And then?", "max_output_tokens": 8, "previous_response_id": r.json()["id"]}
            r2 = client.post(path, json=follow)
            if r2.status_code != 200:
                problem = f"continuation status {r2.status_code}: {r2.text[:200]}"
        if problem:
            res.error(f"{kind}: {problem}")
        else:
            res.add(time.time(), time.time() - t, kind)
    except httpx.HTTPError as exc:
        res.error(f"{kind}: transport {type(exc).__name__}")


def warm_up(base: str) -> None:
    """One request of each constraint kind before the clock starts: the first one builds the tokenizer's
    constraint index, which on a loaded machine can exceed the 10 s compile budget (then a 400)."""
    with httpx.Client(base_url=base, timeout=300) as client:
        for body in ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}},
                     {"tools": TOOLS, "tool_choice": "required"}):
            for _ in range(3):
                r = client.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4,
                                                              "messages": [{"role": "user", "content": "hi"}], **body})
                if r.status_code == 200:
                    break


def metric(text: str, name: str) -> float:
    m = re.search(rf"^recipe:{name}\{{[^}}]*\}} ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def sample(base: str, pid: int) -> dict[str, float]:
    text = httpx.get(base + "/metrics", timeout=30).text
    return {"t": time.time(), "rss_mib": rss_kib(pid) / 1024, "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
            "kv_usage": metric(text, "kv_cache_usage_perc"), "kv_blocks": metric(text, "kv_cache_blocks_used"),
            "running": metric(text, "num_requests_running"),
            "waiting": metric(text, "num_requests_waiting")}


def plot(windows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [w["t_min"] for w in windows]
    fig, ax = plt.subplots(5, 1, figsize=(9, 13), sharex=True)
    ax[0].plot(t, [w["throughput_rps"] for w in windows])
    ax[0].set_ylabel("requests/s")
    ax[1].plot(t, [w["p50_s"] for w in windows], label="p50")
    ax[1].plot(t, [w["p99_s"] for w in windows], label="p99")
    ax[1].set_ylabel("latency (s)")
    ax[1].legend()
    ax[2].plot(t, [w["rss_mib"] for w in windows])
    ax[2].set_ylabel("server RSS (MiB)")
    ax[3].plot(t, [w["fds"] for w in windows])
    ax[3].set_ylabel("open fds")
    ax[4].plot(t, [w["kv_blocks_used"] for w in windows])
    ax[4].set_ylabel("KV blocks used")
    ax[4].set_xlabel("minutes")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, required=True, help="seconds of load")
    ap.add_argument("--backend", choices=("engine", "echo"), default="engine")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--sample-every", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=None, help="seconds excluded from RSS growth (default 10%%)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--kv-cache-bytes", type=int, default=512 << 20, help="the engine's KV cache")
    ap.add_argument("--out", default=None, help="folder for soak.json and soak.png")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="recipe-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "recipe.cli", "serve", "--port", str(port), "--backend", args.backend,
           "--responses-db", str(out / "responses.sqlite3"), "--served-model-name", MODEL, "--log-level", "warning",
           "--max-model-len", "1024"]
    cmd += (["--echo-token-delay", "0.01"] if args.backend == "echo"
            else ["--threads", "1", "--kv-cache-bytes", str(args.kv_cache_bytes)])
    proc = subprocess.Popen(cmd, stdout=(out / "server.log").open("wb"), stderr=subprocess.STDOUT)
    res = Results()
    samples: list[dict[str, float]] = []
    stop = threading.Event()
    try:
        wait_healthy(base, proc)
        warm_up(base)
        t0 = time.time()
        samples.append(sample(base, proc.pid))

        def worker(seed: int) -> None:
            rnd = random.Random(seed)
            with httpx.Client(base_url=base, timeout=300) as client:
                while not stop.is_set():
                    one(client, rnd, res)

        threads = [threading.Thread(target=worker, args=(args.seed * 100 + i,)) for i in range(args.concurrency)]
        for th in threads:
            th.start()
        while time.time() - t0 < args.duration:
            time.sleep(min(args.sample_every, max(0.0, args.duration - (time.time() - t0))))
            samples.append(sample(base, proc.pid))
            s = samples[-1]
            print(f"{(s['t'] - t0) / 60:5.1f} min: {len(res.done)} ok, {len(res.errors)} errors, "
                  f"{res.disconnects} disconnects, RSS {s['rss_mib']:.0f} MiB, fds {s['fds']}, KV blocks {s['kv_blocks']:.0f}",
                  flush=True)
        stop.set()
        for th in threads:
            th.join(timeout=600)
        load_end = time.time()
        deadline = time.time() + 120
        while time.time() < deadline:  # let aborted requests finish leaving the engine
            idle = sample(base, proc.pid)
            if idle["running"] == 0 and idle["waiting"] == 0:
                break
            time.sleep(0.5)
        time.sleep(1.0)
        final = sample(base, proc.pid)
        healthy = httpx.get(base + "/health", timeout=30).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    windows = []
    for a, b in itertools.pairwise(samples):
        lat = [x[1] for x in res.done if a["t"] < x[0] <= b["t"]]
        qs = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [float("nan")] * 99
        windows.append({"t_min": round((b["t"] - t0) / 60, 2), "requests": len(lat),
                        "throughput_rps": round(len(lat) / (b["t"] - a["t"]), 3),
                        "p50_s": round(qs[49], 3), "p99_s": round(qs[98], 3),
                        "rss_mib": round(b["rss_mib"], 1), "fds": b["fds"], "kv_usage": b["kv_usage"],
                        "kv_blocks_used": b["kv_blocks"]})
    warmup = args.warmup if args.warmup is not None else 0.1 * args.duration
    after = [s for s in samples if s["t"] - t0 >= warmup] or samples
    all_lat = [x[1] for x in res.done]
    qs = statistics.quantiles(all_lat, n=100) if len(all_lat) >= 2 else [float("nan")] * 99
    log = (out / "server.log").read_text(errors="replace")
    summary = {
        "backend": args.backend, "duration_s": round(load_end - t0, 1), "concurrency": args.concurrency,
        "requests_ok": len(res.done), "deliberate_disconnects": res.disconnects, "errors": len(res.errors),
        "error_examples": sorted(set(res.errors))[:10],
        "throughput_rps": round(len(res.done) / (load_end - t0), 3), "p50_s": round(qs[49], 3), "p99_s": round(qs[98], 3),
        "rss_mib_after_warmup": round(after[0]["rss_mib"], 1), "rss_mib_end": round(final["rss_mib"], 1),
        "rss_growth_after_warmup": round(final["rss_mib"] / after[0]["rss_mib"] - 1, 4),
        "fds_start": samples[0]["fds"], "fds_end": final["fds"],
        "kv_usage_at_idle": final["kv_usage"], "kv_blocks_leaked": int(final["kv_blocks"]),
        "running_at_end": final["running"], "waiting_at_end": final["waiting"], "healthy_after": healthy,
        "tracebacks_in_server_log": log.count("Traceback"), "windows": windows,
        "by_scenario": {k: sum(1 for x in res.done if x[2] == k) for k in sorted({x[2] for x in res.done})},
    }
    (out / "soak.json").write_text(json.dumps(summary, indent=1))
    plot(windows, out / "soak.png", f"recipe serve soak ({args.backend}, {summary['duration_s'] / 60:.0f} min, "
                                    f"{args.concurrency} clients)")
    print(json.dumps({k: v for k, v in summary.items() if k != "windows"}, indent=1))
    print(f"wrote {out / 'soak.json'} and {out / 'soak.png'}")
    ok = (not res.errors and final["kv_blocks"] == 0 and healthy and summary["rss_growth_after_warmup"] < 0.05
          and summary["tracebacks_in_server_log"] == 0)
    print("goals (0 errors, 0 leaked blocks, RSS growth < 5% after warm-up, healthy):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
