"""Engine benchmark: SmolLM2 on this machine, every figure a ratio against its anchor measured in the same run.

    python bench/engine.py                       # everything, scaled for a shared 2-core box
    python bench/engine.py --only batch1,prefix  # a subset
    python bench/engine.py --mixed-requests 64 --mixed-batch 32 --prompt-max 2000 --out-max 512  # the full issue workload

Figures (medians over --repeats runs; every timed run gets a fresh random prompt, warm-up excluded):
  batch1   batch-1 decode tok/s of Recipe per weight format and decode backend (--decode-backends: `layers`,
           the decoder layers' torch modules, or `fused`, one native call per step) vs llama.cpp on the same GGUF
           (llama-cpp-python, installed by this script) and vs `transformers.generate`, all in one run; Recipe
           runs with prefix caching off, so it pays the same prefill as the others. Roofline: read bandwidth (a
           reduction over 1 GiB, the better of 4 KiB and huge pages, taken after every round) / bytes of weights
           read per step; the fraction of it reached is the median over rounds of each round's own fraction
  overhead batch-1 decode ms per step of SmolLM2 cut to --overhead-layers layer(s): what a step costs besides
           reading the weights, with the reference paths (SDPA loop, torch RMSNorm) vs the native kernels
  scaling  aggregate decode tok/s at 1, 8, 32, 64 concurrent sequences and the ratio to batch 1, per attention
           backend on the layered step (--scaling-backends; `fused` is native attention with the fused decode step)
  prefill  tok/s of a fresh 2K-token prompt (TTFT) vs llama.cpp and `transformers`
  quality  per weight format: greedy agreement with fp32 over 64 tokens on chat prompts, perplexity on a fixed text
  mixed    useful output tokens/s on a seeded workload of varied prompt/output lengths: `transformers` in static
           left-padded batches vs Recipe's continuous batching
  prefix   TTFT of a long prompt whose prefix is cached vs the same prompt uncached
  async    model-thread idle fraction and throughput, asynchronous vs synchronous scheduling, at batch 32
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF dequantizer's progress bar

import sysconfig
from pathlib import Path

import torch
from engine_baselines import LLAMA_CPP_VERSION, LlamaCpp, ReadBandwidth
from recipe.engine import LLM, SamplingParams
from recipe.engine.context import AttentionContext, reset_context, set_context
from recipe.engine.device import parse_dtype
from recipe.engine.models.registry import load_model, smollm2_path


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def random_prompt(g: torch.Generator, n: int, vocab: int) -> list[int]:
    return torch.randint(100, vocab - 100, (n,), generator=g).tolist()


def transformers_model(dtype: torch.dtype) -> Any:
    """`transformers` LlamaForCausalLM on the GGUF's weights, dequantized by transformers' own loader."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    with torch.device("meta"):
        skeleton = LlamaForCausalLM(LlamaConfig(num_hidden_layers=30, hidden_size=64, intermediate_size=64,
                                                num_attention_heads=4, vocab_size=64))
    loaded = load_gguf_checkpoint(str(smollm2_path()), return_tensors=True, model_to_load=skeleton)
    raw = loaded["config"]
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "_model_name_or_path")})
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(loaded["tensors"], strict=False)
    assert not unexpected and all("lm_head" in m for m in missing), (missing, unexpected)
    model.tie_weights()
    return model.to(dtype).eval()


def hf_generate(model: Any, batch: list[list[int]], new_tokens: int) -> None:
    """Left-padded static batch, greedy, exactly `new_tokens` new tokens per row."""
    width = max(len(p) for p in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, p in enumerate(batch):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, pad_token_id=0)


def step_bytes(model: Any) -> int:
    """Bytes of weights one decode step reads: every decoder layer's tensors, the final norm and the LM head
    (the embedding table only when it is the tied head; a lookup reads one row)."""
    seen: set[int] = set()
    total = 0

    def add(tensors: Any) -> None:
        nonlocal total
        for t in tensors:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()

    add(model.layers.parameters())
    add(model.layers.buffers())
    add(model.norm.parameters())
    if getattr(model, "logits_head", None) is not None:
        add(model.logits_head.buffers())
    else:
        add([model.head_weight])
    return total


def recipe_llm(args: argparse.Namespace, weight_format: str, layers: int | None = None, **config: Any) -> LLM:
    """A fresh engine on freshly loaded weights (quantising changes the model in place), with the speed paths
    of --attention-backend / --norm-backend / --huge-pages (its first) unless `config` says otherwise; `layers`
    keeps only the first few."""
    model, info = load_model("smollm2", dtype=parse_dtype(args.dtype), device="cpu")
    if layers is not None:
        del model.layers[layers:]
    config = {"num_kv_blocks": args.kv_blocks, "attention_backend": args.attention_backend,
              "huge_pages": args.huge_pages.split(",")[0] == "on",
              "norm_backend": args.norm_backend, "step_threads": args.step_threads, **config}
    return LLM((model, info), dtype=args.dtype, num_threads=args.threads, weight_format=weight_format, **config)


def recipe_decode(llm: LLM, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    """(TTFT, seconds per later token) of one greedy request."""
    out = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True))[0]
    times = out.timing.token_times
    assert out.timing.ttft is not None
    return out.timing.ttft, (times[-1] - times[0]) / max(1, len(times) - 1)


def hf_decode(model: Any, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    """(time of a 1-token generate, seconds per later token from an N-token generate on the same prompt)."""
    t = time.perf_counter()
    hf_generate(model, [prompt], 1)
    one = time.perf_counter() - t
    t = time.perf_counter()
    hf_generate(model, [prompt], new_tokens)
    return one, (time.perf_counter() - t - one) / max(1, new_tokens - 1)


def bench_batch1(args: argparse.Namespace, hf: Any, cpp: Any) -> None:
    """Batch-1 decode, every side on a fresh random prompt per timed run (no prefix cache hit for anyone:
    Recipe runs with prefix caching off), warm-up on another prompt. The contenders take turns prompt by prompt,
    in an order rotated every round, so that all of them see the same load."""
    g = torch.Generator().manual_seed(1)
    vocab = 49152
    prompts = [random_prompt(g, args.batch1_prompt, vocab) for _ in range(args.repeats + 1)]
    contenders: dict[str, tuple[Callable[[list[int]], tuple[float, float]], int | None]] = {}
    llms = []
    if cpp is not None:
        contenders["llama.cpp (Q4_1 GGUF)"] = (lambda p: cpp.decode(p, args.batch1_new), None)
    if hf is not None:
        contenders[f"transformers {args.dtype}"] = (lambda p: hf_decode(hf, p, args.batch1_new), None)
    pages = args.huge_pages.split(",")
    for fmt in args.formats.split(","):
        for backend in args.decode_backends.split(","):
            for huge in pages:
                llm = recipe_llm(args, fmt, enable_prefix_caching=False, decode_backend=backend,
                                 huge_pages=huge == "on")
                llms.append(llm)
                name = f"recipe {fmt if fmt != 'dtype' else args.dtype} {backend}"
                name += f" huge-pages {huge}" if len(pages) > 1 else ""
                contenders[name] = (partial(recipe_decode, llm, new_tokens=args.batch1_new),
                                    step_bytes(llm.engine.model))
    for fn, _ in contenders.values():
        fn(prompts[0])  # warm-up
    per_token: dict[str, list[float]] = {name: [] for name in contenders}
    bandwidth = ReadBandwidth()
    bws = []  # read bandwidth beside each round: the roofline fraction is taken per round, then the median
    names = list(contenders)
    for i, p in enumerate(prompts[1:]):
        # the order rotates every round, so that each contender follows each other one as often (a contender
        # runs measurably slower after transformers' compute-bound turn than after a memory-bound one)
        for name in names[i % len(names):] + names[: i % len(names)]:
            gc.collect()  # each contender starts from a collected heap, not the previous one's garbage
            per_token[name].append(contenders[name][0](p)[1])
        bws.append(bandwidth.measure(3))
    del bandwidth
    for llm in llms:
        llm.shutdown()
    rows = [(name, 1 / statistics.median(per_token[name]), per_token[name], nbytes)
            for name, (_, nbytes) in contenders.items()]
    anchor = {name: tps for name, tps, _, _ in rows}
    print(f"batch1: decode tok/s, prompt {args.batch1_prompt}, {args.batch1_new} new tokens, fresh prompt per run; "
          f"read bandwidth {statistics.median(bws) / 1e9:.1f} GB/s median, {min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f} "
          "over the rounds (reduction over 1 GiB after each round, the better of 4 KiB and huge pages)")
    for name, tps, times, nbytes in rows:
        line = f"  {name:44s} {tps:8.1f} tok/s"
        for ref in ("llama.cpp (Q4_1 GGUF)", f"transformers {args.dtype}"):
            if ref in anchor and name.startswith("recipe"):
                line += f"   {tps / anchor[ref]:.2f}x {ref.split()[0]}"
        if nbytes:
            fractions = [nbytes / (t * bw) for t, bw in zip(times, bws, strict=True)]
            line += (f"   {nbytes / 1e6:.0f} MB/step, roofline {statistics.median(bws) / nbytes:.0f} steps/s, "
                     f"{statistics.median(fractions):.0%} of it (rounds {min(fractions):.0%}-{max(fractions):.0%})")
        print(line)
    if cpp is not None and cpp.install_seconds is not None:
        print(f"  (llama-cpp-python {LLAMA_CPP_VERSION} built and installed in {cpp.install_seconds:.0f} s)")


def bench_overhead(args: argparse.Namespace) -> None:
    """Batch-1 decode of a 1-layer SmolLM2 (same embedding, LM head and step machinery), each variant on the
    same fresh prompts, interleaved run by run so that all see the same load."""
    g = torch.Generator().manual_seed(7)
    prompts = [random_prompt(g, args.batch1_prompt, 49152) for _ in range(args.repeats + 1)]
    variants = {
        f"reference {args.dtype}": ("dtype", {"attention_backend": "reference", "norm_backend": "torch",
                                              "decode_backend": "layers"}),
        f"native {args.dtype}": ("dtype", {"attention_backend": "native", "norm_backend": "native",
                                           "decode_backend": "layers"}),
        "native q4_1": ("q4_1", {"attention_backend": "native", "norm_backend": "native", "decode_backend": "layers"}),
        "native q4_1 fused": ("q4_1", {"attention_backend": "native", "norm_backend": "native",
                                       "decode_backend": "fused"}),
    }
    llms = {name: recipe_llm(args, fmt, layers=args.overhead_layers, enable_prefix_caching=False, **cfg)
            for name, (fmt, cfg) in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in llms}
    for llm in llms.values():
        recipe_decode(llm, prompts[0], args.batch1_new)
    for p in prompts[1:]:
        for name, llm in llms.items():
            times[name].append(recipe_decode(llm, p, args.batch1_new)[1])
    for llm in llms.values():
        llm.shutdown()
    base = statistics.median(times[f"reference {args.dtype}"])
    print(f"overhead: batch-1 decode of SmolLM2 cut to {args.overhead_layers} layer(s), ms per step "
          f"(prompt {args.batch1_prompt}, {args.batch1_new} new tokens)")
    for name, ts in times.items():
        ms = statistics.median(ts) * 1e3
        print(f"  {name:28s} {ms:8.2f} ms/step   {base * 1e3 / ms:.2f}x the reference")


def bench_scaling(args: argparse.Namespace) -> None:
    """Aggregate decode tok/s with 1, 8, 32, 64 concurrent sequences (short fresh prompts, equal lengths), per
    attention backend (batched vs the per-sequence reference), interleaved so both see the same load."""
    g = torch.Generator().manual_seed(5)
    fmt = args.formats.split(",")[0] if args.scaling_format is None else args.scaling_format
    backends = args.scaling_backends.split(",")
    llms = {b: recipe_llm(args, fmt, enable_prefix_caching=False, max_num_seqs=max(args.scaling),
                          **({"attention_backend": "native", "decode_backend": "fused"} if b == "fused"
                             else {"attention_backend": b, "decode_backend": "layers"}))
            for b in backends}
    for llm in llms.values():
        llm.generate(random_prompt(g, 16, 49152), SamplingParams(temperature=0.0, max_tokens=4))
    results: dict[str, list[tuple[int, float]]] = {b: [] for b in backends}
    for n in args.scaling:
        prompts = [random_prompt(g, args.scaling_prompt, 49152) for _ in range(n)]
        for b, llm in llms.items():
            outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=args.scaling_new, ignore_eos=True))
            first = max(o.timing.token_times[0] for o in outs)  # every sequence is decoding from here on
            last = max(o.timing.token_times[-1] for o in outs)
            tokens = sum(sum(1 for t in o.timing.token_times if t > first) for o in outs)
            results[b].append((n, tokens / (last - first)))
    for llm in llms.values():
        llm.shutdown()
    print(f"scaling: recipe {fmt}, aggregate decode tok/s, prompt {args.scaling_prompt}, {args.scaling_new} new tokens")
    for b, rows in results.items():
        base = rows[0][1]
        for n, tps in rows:
            print(f"  {b:9s} {n:3d} sequences {tps:8.1f} tok/s   {tps / base:.2f}x batch 1"
                  + ("  (goal >= 6x)" if n == 32 else ""))


def bench_prefill(args: argparse.Namespace, hf: Any, cpp: Any) -> None:
    """Prefill tok/s of a fresh prompt of --prefill-len tokens (time to first token)."""
    g = torch.Generator().manual_seed(6)
    prompts = [random_prompt(g, args.prefill_len, 49152) for _ in range(args.repeats + 1)]
    rows = []

    def run(name: str, fn: Callable[[list[int]], float]) -> None:
        fn(prompts[0])
        rows.append((name, args.prefill_len / statistics.median(fn(p) for p in prompts[1:])))

    if cpp is not None:
        run("llama.cpp (Q4_1 GGUF)", cpp.prefill)
    if hf is not None:
        run(f"transformers {args.dtype}", lambda p: hf_decode(hf, p, 1)[0])
    for fmt in args.formats.split(","):
        llm = recipe_llm(args, fmt, enable_prefix_caching=False, max_num_batched_tokens=args.prefill_len)
        run(f"recipe {fmt if fmt != 'dtype' else args.dtype}", lambda p, llm=llm: recipe_decode(llm, p, 1)[0])
        llm.shutdown()
    print(f"prefill: {args.prefill_len}-token fresh prompt, tok/s (time to first token)")
    anchor = dict(rows)
    for name, tps in rows:
        ratios = "".join(f"   {tps / anchor[r]:.2f}x {r.split()[0]}" for r in anchor if not r.startswith("recipe")
                         and name.startswith("recipe"))
        print(f"  {name:28s} {tps:8.1f} tok/s{ratios}")


QUALITY_QUESTIONS = [
    "What is the capital of France?", "Write a haiku about the sea.", "Explain photosynthesis in two sentences.",
    "List three prime numbers greater than 50.", "How do I reverse a list in Python?",
    "What causes the seasons on Earth?", "Give me a short recipe for pancakes.", "Translate 'good morning' to Spanish.",
]


def perplexity(model: Any, ids: list[int]) -> float:
    """exp(mean next-token NLL) of `ids` in one prefill on the model's own paged attention."""
    n, bs = len(ids), 16
    blocks = (n + bs - 1) // bs
    model.allocate_kv_cache(blocks, bs, model.embed_tokens.weight.dtype, "cpu")
    set_context(AttentionContext(
        query_lens=[n], context_lens_list=[n], cu_seqlens_q=torch.tensor([0, n]), context_lens=torch.tensor([n]),
        slot_mapping=torch.arange(n), block_tables=torch.arange(blocks)[None], block_size=bs))
    try:
        with torch.inference_mode():
            t = torch.tensor(ids)
            logits = model.compute_logits(model(t, torch.arange(n)))
    finally:
        reset_context()
    return float(torch.nn.functional.cross_entropy(logits[:-1], t[1:]).exp())


def bench_quality(args: argparse.Namespace) -> None:
    """Per weight format: greedy agreement with fp32 over --quality-new tokens on a prompt set, and perplexity
    on a fixed text (the first --ppl-tokens tokens of CPython's LICENSE)."""
    from tokenizers import Tokenizer

    formats = ["float32", *(f for f in args.formats.split(",") if f != "dtype"), *(["bfloat16"] if args.dtype != "bfloat16" else [])]
    _, info = load_model("smollm2", dtype=torch.float32)
    tok = Tokenizer.from_str(info.tokenizer_json)
    prompts = [tok.encode(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n").ids for q in QUALITY_QUESTIONS]
    text = (Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt").read_text(encoding="utf-8")
    ids = tok.encode(text).ids[: args.ppl_tokens]
    params = SamplingParams(temperature=0.0, max_tokens=args.quality_new, ignore_eos=True)
    reference: list[tuple[int, ...]] = []
    print(f"quality: greedy agreement with float32 over {args.quality_new} tokens on {len(prompts)} chat prompts; "
          f"perplexity on {len(ids)} tokens of CPython's LICENSE.txt")
    for name in formats:
        dtype, fmt = (name, "dtype") if name in ("float32", "bfloat16") else (args.dtype, name)
        model, info = load_model("smollm2", dtype=parse_dtype(dtype))
        llm = LLM((model, info), dtype=dtype, num_threads=args.threads, num_kv_blocks=256, weight_format=fmt,
                  attention_backend=args.attention_backend, norm_backend=args.norm_backend)
        outs = [o.new_token_ids for o in llm.generate(prompts, params)]
        llm.shutdown()
        if not reference:
            reference = outs
        same = sum(a == b for o, r in zip(outs, reference, strict=True) for a, b in zip(o, r, strict=True))
        prefix = [next((i for i, (a, b) in enumerate(zip(o, r, strict=True)) if a != b), len(r))
                  for o, r in zip(outs, reference, strict=True)]
        ppl = perplexity(llm.engine.model, ids)
        label = name if fmt == "dtype" else f"{name} ({dtype} activations)"
        print(f"  {label:30s} tokens equal {same / (len(prompts) * args.quality_new):6.1%}, "
              f"mean agreeing prefix {statistics.mean(prefix):5.1f}/{args.quality_new}, perplexity {ppl:7.3f}")


def mixed_workload(args: argparse.Namespace, vocab: int) -> list[tuple[list[int], int]]:
    g = torch.Generator().manual_seed(args.seed)
    plens = torch.randint(args.prompt_min, args.prompt_max + 1, (args.mixed_requests,), generator=g).tolist()
    olens = torch.randint(args.out_min, args.out_max + 1, (args.mixed_requests,), generator=g).tolist()
    return [(random_prompt(g, p, vocab), o) for p, o in zip(plens, olens, strict=True)]


def bench_mixed(args: argparse.Namespace, hf: Any, llm: LLM) -> None:
    work = mixed_workload(args, llm.engine.vocab_size)
    useful = sum(o for _, o in work)
    t = time.perf_counter()
    for i in range(0, len(work), args.mixed_batch):
        chunk = work[i:i + args.mixed_batch]
        hf_generate(hf, [p for p, _ in chunk], max(o for _, o in chunk))
    t_hf = time.perf_counter() - t
    t = time.perf_counter()
    llm.generate([p for p, _ in work], [SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True) for _, o in work])
    t_re = time.perf_counter() - t
    print(f"mixed: {len(work)} requests, prompts {args.prompt_min}-{args.prompt_max}, outputs "
          f"{args.out_min}-{args.out_max} (seed {args.seed}); transformers in static batches of {args.mixed_batch}")
    print(f"  transformers.generate {useful / t_hf:8.1f} useful tok/s ({t_hf:.1f} s)")
    print(f"  recipe                {useful / t_re:8.1f} useful tok/s ({t_re:.1f} s)   ratio {t_hf / t_re:.2f}x "
          "(goal >= 3x)")


def bench_prefix(args: argparse.Namespace, llm: LLM) -> None:
    g = torch.Generator().manual_seed(3)
    vocab = llm.engine.vocab_size
    prefix = random_prompt(g, args.prefix_cached, vocab)
    one = SamplingParams(temperature=0.0, max_tokens=1)
    cached, uncached = [], []
    for _ in range(args.repeats):
        llm.generate(prefix + random_prompt(g, 5, vocab), one)  # puts the prefix in the cache
        prompt = prefix + random_prompt(g, args.prefix_len - args.prefix_cached, vocab)
        out = llm.generate(prompt, one)[0]
        assert out.cached_tokens >= args.prefix_cached - llm.engine.config.kv.block_size, out.cached_tokens
        cached.append(out.timing.ttft)
        fresh = random_prompt(g, args.prefix_len, vocab)
        uncached.append(llm.generate(fresh, one)[0].timing.ttft)
    c, u = statistics.median(cached), statistics.median(uncached)
    print(f"prefix: {args.prefix_len}-token prompt, {args.prefix_cached}-token prefix cached")
    print(f"  TTFT uncached {u * 1e3:8.1f} ms, cached {c * 1e3:8.1f} ms   ratio {c / u:.3f}x (goal <= 0.1x)")


def bench_async(args: argparse.Namespace, model: Any, info: Any) -> None:
    g = torch.Generator().manual_seed(4)
    prompts = [random_prompt(g, args.async_prompt, info.vocab_size) for _ in range(args.async_batch)]
    params = SamplingParams(temperature=0.8, top_p=0.95, seed=1, max_tokens=args.async_new, ignore_eos=True)
    results = {}
    for mode in (False, True):
        llm = LLM((model, info), dtype=args.dtype, num_threads=args.threads, async_scheduling=mode,
                  num_kv_blocks=args.kv_blocks, max_num_seqs=args.async_batch)
        llm.generate(prompts[:2], SamplingParams(max_tokens=2))
        walls, idles, outs = [], [], []
        for _ in range(args.repeats):
            busy0 = llm.engine.model_busy_s
            t = time.perf_counter()
            outs.append(llm.generate(prompts, params))
            wall = time.perf_counter() - t
            walls.append(wall)
            idles.append(1 - (llm.engine.model_busy_s - busy0) / wall)
        results[mode] = (statistics.median(walls), statistics.median(idles), outs[-1])
        llm.shutdown()
    (ws, is_, os_), (wa, ia, oa) = results[False], results[True]
    assert [o.new_token_ids for o in os_] == [o.new_token_ids for o in oa], "async and sync outputs differ"
    tokens = args.async_batch * args.async_new
    print(f"async: batch {args.async_batch}, prompt {args.async_prompt}, {args.async_new} new tokens (seeded sampling)")
    print(f"  sync  {tokens / ws:8.1f} tok/s, model thread idle {is_:.1%}")
    print(f"  async {tokens / wa:8.1f} tok/s, model thread idle {ia:.1%} (goal < 5%)   throughput gain "
          f"{ws / wa:.2f}x; outputs identical")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="batch1,overhead,scaling,prefill,quality,mixed,prefix,async")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--formats", default="dtype,q8_0,q4_1",
                   help="Recipe weight formats to measure (EngineConfig.weight_format; also int8, int4, and gguf / "
                        "gguf_q8: the GGUF file's own blocks with fp32 / Q8_0-rounded activations)")
    p.add_argument("--attention-backend", default="native", help="EngineConfig.attention_backend of Recipe's runs")
    p.add_argument("--norm-backend", default="native", help="EngineConfig.norm_backend of Recipe's runs")
    p.add_argument("--step-threads", default="off", choices=("auto", "off"),
                   help="EngineConfig.step_threads of Recipe's runs")
    p.add_argument("--decode-backends", default="layers,fused",
                   help="EngineConfig.decode_backend values measured side by side in batch1")
    p.add_argument("--huge-pages", default="on", choices=("on", "off", "on,off"),
                   help="batch1: Recipe's weights in transparent huge pages (EngineConfig.huge_pages); on,off runs both")
    p.add_argument("--overhead-layers", type=int, default=1)
    p.add_argument("--llama-cpp", action=argparse.BooleanOptionalAction, default=True,
                   help="compare with llama.cpp (installs llama-cpp-python into this environment if missing)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kv-blocks", type=int, default=2048, help="KV pool blocks of 16 tokens")
    p.add_argument("--batch1-prompt", type=int, default=128)
    p.add_argument("--batch1-new", type=int, default=128)
    p.add_argument("--scaling", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8, 32, 64])
    p.add_argument("--scaling-format", default=None, help="weight format for the scaling figure (default: first of --formats)")
    p.add_argument("--scaling-backends", default="native,reference", help="attention backends for the scaling figure ('fused': native attention, fused decode step)")
    p.add_argument("--scaling-prompt", type=int, default=32)
    p.add_argument("--scaling-new", type=int, default=48)
    p.add_argument("--prefill-len", type=int, default=2048)
    p.add_argument("--quality-new", type=int, default=64)
    p.add_argument("--ppl-tokens", type=int, default=1024)
    p.add_argument("--mixed-requests", type=int, default=16)
    p.add_argument("--mixed-batch", type=int, default=8)
    p.add_argument("--prompt-min", type=int, default=50)
    p.add_argument("--prompt-max", type=int, default=500)
    p.add_argument("--out-min", type=int, default=16)
    p.add_argument("--out-max", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix-len", type=int, default=2000)
    p.add_argument("--prefix-cached", type=int, default=1900)
    p.add_argument("--async-batch", type=int, default=32)
    p.add_argument("--async-prompt", type=int, default=32)
    p.add_argument("--async-new", type=int, default=32)
    args = p.parse_args()
    only = set(args.only.split(","))
    torch.set_num_threads(args.threads)
    dtype = parse_dtype(args.dtype)
    print(f"SmolLM2-135M-Instruct, {args.dtype}, {args.threads} threads, torch {torch.__version__}")
    hf = transformers_model(dtype) if only & {"batch1", "mixed", "prefill"} else None
    cpp = LlamaCpp(str(smollm2_path()), args.threads) if args.llama_cpp and only & {"batch1", "prefill"} else None
    if "batch1" in only:
        bench_batch1(args, hf, cpp)
    if "overhead" in only:
        bench_overhead(args)
    if "scaling" in only:
        bench_scaling(args)
    if "prefill" in only:
        bench_prefill(args, hf, cpp)
    if "quality" in only:
        bench_quality(args)
    if only & {"mixed", "prefix", "async"}:
        model, info = load_model("smollm2", dtype=dtype, device="cpu")
        llm = LLM((model, info), dtype=args.dtype, num_threads=args.threads, num_kv_blocks=args.kv_blocks)
        if "mixed" in only:
            bench_mixed(args, hf, llm)
        if "prefix" in only:
            bench_prefix(args, llm)
        llm.shutdown()
        if "async" in only:
            bench_async(args, model, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
