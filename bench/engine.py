"""Engine benchmark: SmolLM2 on this machine, every figure a ratio against its anchor measured in the same run.

    python bench/engine.py                       # everything, scaled for a shared 2-core box
    python bench/engine.py --only batch1,prefix  # a subset
    python bench/engine.py --mixed-requests 64 --mixed-batch 32 --prompt-max 2000 --out-max 512  # the full issue workload

Figures (medians over --repeats runs):
  batch1   output tokens/s of Recipe vs `transformers.generate` (same weights, dtype, threads), one request;
           and Recipe's batch-1 decode steps/s as a fraction of the memory-bandwidth roofline
           (measured copy bandwidth / bytes of weights read per step)
  mixed    useful output tokens/s on a seeded workload of varied prompt/output lengths: `transformers` in static
           left-padded batches vs Recipe's continuous batching
  prefix   TTFT of a long prompt whose prefix is cached vs the same prompt uncached
  async    model-thread idle fraction and throughput, asynchronous vs synchronous scheduling, at batch 32
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF dequantizer's progress bar

import torch
from recipe.engine import LLM, SamplingParams
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


def copy_bandwidth(threads: int) -> float:
    """Bytes copied per second by torch (1 GiB fp32 tensor), median of 5."""
    src = torch.ones(1 << 28)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = median_time(lambda: dst.copy_(src), 5)
    return src.numel() * 4 / t


def weight_bytes(model: torch.nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def bench_batch1(args: argparse.Namespace, hf: Any, llm: LLM) -> None:
    g = torch.Generator().manual_seed(1)
    prompt = random_prompt(g, args.batch1_prompt, llm.engine.vocab_size)
    params = SamplingParams(temperature=0.0, max_tokens=args.batch1_new, ignore_eos=True)
    hf_generate(hf, [prompt], 4)  # warm-up
    llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4))
    t_hf = median_time(lambda: hf_generate(hf, [prompt], args.batch1_new), args.repeats)
    outs: list[Any] = []
    t_re = median_time(lambda: outs.append(llm.generate(prompt, params)[0]), args.repeats)
    itl = statistics.median(x for o in outs for x in o.timing.inter_token_latencies)
    print(f"batch1: prompt {len(prompt)}, {args.batch1_new} new tokens")
    print(f"  transformers.generate {args.batch1_new / t_hf:8.1f} tok/s")
    print(f"  recipe                {args.batch1_new / t_re:8.1f} tok/s   ratio {t_hf / t_re:.2f}x (goal >= 1.0x)")
    bw = copy_bandwidth(args.threads)
    per_step = weight_bytes(llm.engine.model)
    roof = bw / per_step
    print(f"  roofline: {per_step / 1e6:.0f} MB of weights per step, copy bandwidth {bw / 1e9:.1f} GB/s "
          f"-> {roof:.0f} steps/s; recipe decode {1 / itl:.1f} steps/s = {itl and (1 / itl) / roof:.0%} of roofline")


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
        assert out.cached_tokens >= args.prefix_cached - llm.engine.config.block_size, out.cached_tokens
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
    p.add_argument("--only", default="batch1,mixed,prefix,async")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kv-blocks", type=int, default=2048, help="KV pool blocks of 16 tokens")
    p.add_argument("--batch1-prompt", type=int, default=128)
    p.add_argument("--batch1-new", type=int, default=128)
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
    model, info = load_model("smollm2", dtype=dtype, device="cpu")
    hf = transformers_model(dtype) if only & {"batch1", "mixed"} else None
    llm = LLM((model, info), dtype=args.dtype, num_threads=args.threads, num_kv_blocks=args.kv_blocks)
    if "batch1" in only:
        bench_batch1(args, hf, llm)
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
