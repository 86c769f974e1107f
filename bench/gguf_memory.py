"""Peak memory of serving a K-quant GGUF, against the file's size.

Writes a synthetic GGUF with a real model's shapes (default: DeepSeek-R1-Distill-Qwen-7B, qwen2, 28 layers, hidden
3584, intermediate 18944, 28 heads, 4 KV heads, vocab 152064) in llama.cpp's Q4_K_M layout (Q4_K, with Q6_K for
the output head and for attn_v / ffn_down in the layers llama.cpp's `use_more_bits` picks), random but well-formed
blocks, written tensor by tensor so writing it takes one tensor's memory. Then, each in a process of its own:
  (a) `LLM(path)` with its defaults loads it and generates a few greedy tokens;
  (b) `recipe serve --model path` answers one short chat request, and is ended by its pid.
Each reports the process's peak resident set (VmHWM) and its ratio to the file's size. The file is deleted at the
end unless --keep. `--kv-cache-bytes` sets both processes' KV pool (default: the engine's own, which on the CPU
is capped at 2 GiB and allocated zeroed, so it is resident).

    nice -n 10 .venv/bin/python bench/gguf_memory.py --dir /tmp
    .venv/bin/python bench/gguf_memory.py --shape tiny   # a seconds-long check of the script itself
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "engine" / "models"))  # the test checkpoints' tokenizer and R1 template

GIB = 1 << 30


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    inter: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool = False
    context: int = 131072
    rope_theta: float = 10000.0


SHAPES = {
    "r1-qwen-7b": Shape(28, 3584, 18944, 28, 4, 152064),
    "r1-qwen-1.5b": Shape(28, 1536, 8960, 12, 2, 151936, tied=True),
    "small": Shape(4, 1024, 2816, 8, 2, 16384),  # ~30 MB: the default suite's memory test
    "tiny": Shape(2, 256, 512, 4, 2, 512),
}


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v / ffn_down Q4_K_M keeps in Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(name: str, layer: int, layers: int) -> str:
    if name == "output.weight":
        return "Q6_K"
    if name.endswith(("attn_v.weight", "ffn_down.weight")) and use_more_bits(layer, layers):
        return "Q6_K"
    return "Q4_K"


# (weights per block, bytes per block, f16 scale offsets, their magnitude): values of a few hundredths
_BLOCKS = {"Q4_K": (256, 144, ((0, 2e-5), (2, 2e-4))), "Q5_K": (256, 176, ((0, 1e-5), (2, 1e-4))),
           "Q6_K": (256, 210, ((208, 5e-6),)), "Q8_0": (32, 34, ((0, 2e-4),))}


def random_blocks(rng: np.random.Generator, qtype: str, rows: int, k: int) -> np.ndarray:
    """[rows, row bytes] of random blocks of `qtype` with finite, small f16 scales."""
    per, nbytes, scales = _BLOCKS[qtype]
    b = rng.integers(0, 256, size=(rows * (k // per), nbytes), dtype=np.uint8)
    for at, size in scales:
        d = (rng.uniform(0.5, 1.5, b.shape[0]) * size).astype(np.float16)
        b[:, at : at + 2] = d.view(np.uint8).reshape(-1, 2)
    return b.reshape(rows, -1)


def tensor_plan(s: Shape, layout: Callable[[str, int, int], str]) -> list[tuple[str, tuple[int, ...], str]]:
    """(GGUF name, shape outermost first, type) in the order llama.cpp writes them."""
    head_dim = s.hidden // s.heads
    kv = s.kv_heads * head_dim
    plan = [("token_embd.weight", (s.vocab, s.hidden), layout("token_embd.weight", -1, s.layers))]
    for i in range(s.layers):
        p = f"blk.{i}."
        plan += [(p + "attn_norm.weight", (s.hidden,), "F32")]
        for x, rows in (("q", s.hidden), ("k", kv), ("v", kv)):
            plan += [(p + f"attn_{x}.weight", (rows, s.hidden), layout(p + f"attn_{x}.weight", i, s.layers)),
                     (p + f"attn_{x}.bias", (rows,), "F32")]
        plan += [(p + "attn_output.weight", (s.hidden, s.hidden), layout(p + "attn_output.weight", i, s.layers)),
                 (p + "ffn_norm.weight", (s.hidden,), "F32"),
                 (p + "ffn_gate.weight", (s.inter, s.hidden), layout(p + "ffn_gate.weight", i, s.layers)),
                 (p + "ffn_up.weight", (s.inter, s.hidden), layout(p + "ffn_up.weight", i, s.layers)),
                 (p + "ffn_down.weight", (s.hidden, s.inter), layout(p + "ffn_down.weight", i, s.layers))]
    plan += [("output_norm.weight", (s.hidden,), "F32")]
    if not s.tied:
        plan += [("output.weight", (s.vocab, s.hidden), layout("output.weight", -1, s.layers))]
    return plan


def write_synthetic_gguf(path: Path, s: Shape, layout: Callable[[str, int, int], str] = q4_k_m_type,
                         seed: int = 0) -> int:
    """Write the file tensor by tensor; its size in bytes."""
    import gguf
    from qwen2_checkpoints import BOS, EOS, R1_SPECIALS, R1_TEMPLATE, byte_symbols

    T = gguf.GGMLQuantizationType
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_block_count(s.layers)
    w.add_context_length(s.context)
    w.add_embedding_length(s.hidden)
    w.add_feed_forward_length(s.inter)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(s.rope_theta)
    w.add_file_type(15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-r1-qwen")
    base = byte_symbols() + R1_SPECIALS
    w.add_token_list(base + [f"tok{i}" for i in range(s.vocab - len(base))])
    w.add_token_types([1] * 256 + [3] * len(R1_SPECIALS) + [1] * (s.vocab - len(base)))
    w.add_token_merges([])
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_chat_template(R1_TEMPLATE)
    plan = tensor_plan(s, layout)
    for name, shape, qtype in plan:
        if qtype == "F32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        else:
            per, nbytes, _ = _BLOCKS[qtype]
            row = shape[1] // per * nbytes
            w.add_tensor_info(name, (shape[0], row), np.dtype(np.uint8), shape[0] * row, raw_dtype=T[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, qtype in plan:
        if qtype == "F32":
            mean = 0.0 if name.endswith("bias") else 1.0
            w.write_tensor_data(rng.normal(mean, 0.1, shape).astype(np.float32))
        else:
            w.write_tensor_data(random_blocks(rng, qtype, shape[0], shape[1]))
    w.close()
    return path.stat().st_size


def peak_rss(pid: int | str = "self") -> dict[str, int]:
    """VmHWM (peak resident) and VmRSS of a process, in bytes (Linux)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    return out


def engine_child(path: str, tokens: int, threads: int | None, kv_cache_bytes: int | None) -> None:
    """In its own process: LLM(path) with its defaults, a few greedy tokens; prints one JSON line."""
    from recipe.engine import LLM, SamplingParams

    before = peak_rss()
    t0 = time.perf_counter()
    llm = LLM(path, num_threads=threads, kv_cache_bytes=kv_cache_bytes)
    loaded = peak_rss()
    t1 = time.perf_counter()
    out = llm.generate([[256, 258, 72, 105, 259, 260]],
                       SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True))[0]
    t2 = time.perf_counter()
    kv = llm.engine.runner.kv_cache
    kv_bytes = 0 if kv is None else sum(t.numel() * t.element_size() for t in kv.tensors.values())
    print(json.dumps({"path": llm.engine.config.compute_path, "kv_pool_bytes": kv_bytes,
                      "tokens": list(out.new_token_ids), "start_rss": before["VmRSS"],
                      "peak_after_load": loaded["VmHWM"], "load_s": t1 - t0, "generate_s": t2 - t1,
                      **peak_rss()}))


def measure_engine(path: Path, tokens: int, threads: int | None, kv_cache_bytes: int | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "engine-child", str(path), "--tokens", str(tokens)]
    if threads:
        cmd += ["--threads", str(threads)]
    if kv_cache_bytes:
        cmd += ["--kv-cache-bytes", str(kv_cache_bytes)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"engine child failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_serve(path: Path, threads: int | None, kv_cache_bytes: int | None, timeout: float = 900.0) -> dict[str, Any]:
    """`recipe serve` on the file: wait for its banner, one short chat request, its VmHWM, then SIGTERM by pid."""
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "recipe.cli", "serve", "--model", str(path), "--port", str(port),
           "--responses-db", ":memory:", "--log-level", "warning"]
    if threads:
        cmd += ["--threads", str(threads)]
    if kv_cache_bytes:
        cmd += ["--kv-cache-bytes", str(kv_cache_bytes)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "RECIPE_API_KEYS": ""})
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        t0 = time.perf_counter()
        while not (seen and seen[-1].startswith("Recipe is serving")):
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"recipe serve exited before its banner:\n{''.join(seen)[-4000:]}")
            seen.append(line)
        ready = time.perf_counter() - t0
        started = peak_rss(proc.pid)
        body = {"model": path.stem, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
                "temperature": 0}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=timeout)
        r.raise_for_status()
        usage = r.json().get("usage", {})
        return {"banner": [line.strip() for line in seen if line.strip()][-2:], "ready_s": ready,
                "peak_at_ready": started["VmHWM"], "completion_tokens": usage.get("completion_tokens"),
                **peak_rss(proc.pid)}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    child = sub.add_parser("engine-child")
    child.add_argument("path")
    child.add_argument("--tokens", type=int, default=4)
    child.add_argument("--threads", type=int, default=None)
    child.add_argument("--kv-cache-bytes", type=int, default=None)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="r1-qwen-7b")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the synthetic file is written")
    ap.add_argument("--tokens", type=int, default=4, help="greedy tokens generated in (a)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kv-cache-bytes", type=int, default=None, help="KV pool of both processes (default: engine's)")
    ap.add_argument("--only", choices=("engine", "serve"), default=None)
    ap.add_argument("--keep", action="store_true", help="keep the synthetic file")
    args = ap.parse_args()
    if args.cmd == "engine-child":
        engine_child(args.path, args.tokens, args.threads, args.kv_cache_bytes)
        return
    shape = SHAPES[args.shape]
    path = Path(args.dir) / f"synthetic-{args.shape}-Q4_K_M.gguf"
    need = 5 * GIB if args.shape == "r1-qwen-7b" else 0
    if shutil.disk_usage(args.dir).free < need:
        raise SystemExit(f"{args.dir} has under {need / GIB:.0f} GiB free")
    try:
        t0 = time.perf_counter()
        size = write_synthetic_gguf(path, shape)
        print(f"wrote {path} ({size / GIB:.2f} GiB, {asdict(shape)}) in {time.perf_counter() - t0:.0f} s", flush=True)
        results: dict[str, Any] = {"file_bytes": size, "shape": args.shape, "kv_cache_bytes": args.kv_cache_bytes}
        for kind, run in (("engine", lambda: measure_engine(path, args.tokens, args.threads, args.kv_cache_bytes)),
                          ("serve", lambda: measure_serve(path, args.threads, args.kv_cache_bytes))):
            if args.only not in (None, kind):
                continue
            r = run()
            results[kind] = r
            kv = results.get("engine", {}).get("kv_pool_bytes")
            print(f"({kind}) peak RSS {r['VmHWM'] / GIB:.2f} GiB = {r['VmHWM'] / size:.2f} x the file "
                  f"(final RSS {r['VmRSS'] / GIB:.2f} GiB" + ("" if kv is None else f"; KV pool {kv / GIB:.2f} GiB")
                  + ")", flush=True)
        print(json.dumps(results))
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
