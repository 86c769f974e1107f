"""DeepSeek-V4 benchmark: KV memory per token of the V4 cache layout, and decode throughput of the tiny V4
against `transformers` in the same run.

    python bench/deepseek_v4.py                 # both parts
    python bench/deepseek_v4.py --only kv       # memory only (no weights: computed from configs)

kv      bytes of cache per token of context at 8K and 64K for one sequence, bf16: the V4 layout (window
        blocks released as they slide out, compressed kinds at 1/rate) against a full cache of the same model
        (every layer's key = value for every token), for the tiny test config and for `transformers`' default DeepSeek-V4 config
        (the published V4-Flash shape); DeepSeek-V3 (MLA latent + rope key) and Llama-3-70B (GQA K and V)
        per token from their published configs, for scale.
decode  output tokens/s of `LLM.generate` (greedy) vs `transformers.generate` on the tiny random V4, batch 1
        and 8, fresh prompts per timed run, one warm-up run each excluded; medians. Both sides get the same
        thread budget (`--threads`, default every core): Recipe as `num_threads`, `transformers` at that
        count (its default) and, side by side, at one thread. Once per `--attention-backend` ("batched": the
        decode rows of a step in one call per layer; "reference": one attention call per sequence) and per
        `--step-threads` ("auto": each step size on the thread count a start-up profile found fastest, up to
        the budget; "off": every step on the budget).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")

import torch
from recipe.engine.kv_kinds import rows_per_block
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from recipe.engine.models.deepseek_v4_config import DeepseekV4Config

BLOCK = 16
BF16 = 2
V3_PER_TOKEN = 61 * (512 + 64) * BF16  # DeepSeek-V3: 61 layers, kv_lora_rank 512 + rope key 64
LLAMA70B_PER_TOKEN = 80 * 2 * 8 * 128 * BF16  # Llama-3-70B: 80 layers, K and V, 8 KV heads x 128


def v4_bytes_per_token(config: dict[str, Any], context: int) -> float:
    """Cache bytes per token of one sequence of `context` tokens (bf16) in the engine's V4 layout, from the
    config alone: the window kind's rows of the trailing window (plus the partly filled blocks at both ends)
    and every compressed kind's rows."""
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(DeepseekV4Config.from_hf(config))
    total = 0
    for spec in model.cache_specs():
        per_block = rows_per_block(spec, BLOCK)
        if spec.tokens_per_row == 1:
            assert spec.window is not None
            blocks = -(-min(context, spec.window + 2 * BLOCK) // BLOCK)
        else:
            blocks = -(-(context // spec.tokens_per_row) // per_block) + 1
        total += blocks * per_block * spec.row_width * BF16
    return total / context


def full_bytes_per_token(config: dict[str, Any]) -> float:
    """A full cache of the same model: every layer's shared key (= value) for every token."""
    c = DeepseekV4Config.from_hf(config)
    return c.num_layers * c.head_dim * BF16


def flash_config() -> dict[str, Any]:
    from transformers import DeepseekV4Config as HF

    return HF().to_dict()


def _test_helpers() -> None:
    """The tiny checkpoints come from the tests' helper module."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine" / "models"))


def tiny_config() -> dict[str, Any]:
    _test_helpers()
    from transformers import DeepseekV4Config as HF
    from v4_checkpoints import PATTERNS, V4_TINY

    return HF(**{**V4_TINY, **PATTERNS["mixed"]}).to_dict()


def run_kv() -> None:
    print("KV cache bytes per token (bf16, one sequence, block 16)")
    print(f"{'config':<22}{'context':>8}{'V4 layout':>12}{'full':>12}{'full / V4':>11}")
    for name, cfg in (("tiny V4 (tests)", tiny_config()), ("V4-Flash (published)", flash_config())):
        for ctx in (8192, 65536):
            v4, full = v4_bytes_per_token(cfg, ctx), full_bytes_per_token(cfg)
            print(f"{name:<22}{ctx:>8}{v4:>12.1f}{full:>12.1f}{full / v4:>10.1f}x")
    flash = v4_bytes_per_token(flash_config(), 65536)
    print(f"for scale at 64K: DeepSeek-V3 {V3_PER_TOKEN} B/token ({V3_PER_TOKEN / flash:.1f}x V4-Flash), "
          f"Llama-3-70B {LLAMA70B_PER_TOKEN} B/token ({LLAMA70B_PER_TOKEN / flash:.1f}x V4-Flash)")


def run_decode(repeats: int, new_tokens: int, backends: list[str], step_threads: list[str], threads: int) -> None:
    from recipe.engine import LLM, SamplingParams
    from transformers import DeepseekV4ForCausalLM as HFModel

    _test_helpers()
    from v4_checkpoints import write_v4_checkpoint

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_v4_checkpoint(Path(tmp), "mixed")
        hf = HFModel.from_pretrained(path, dtype=torch.float32).eval()
        gen = torch.Generator().manual_seed(0)
        print(f"decode tokens/s, tiny V4, {new_tokens} new tokens after 8-token prompts, budget {threads} threads")
        for backend in backends:
            for st in step_threads:
                llm = LLM(str(path), block_size=16, num_kv_blocks=512, num_threads=threads, attention_backend=backend,
                          step_threads=st)
                try:
                    for batch in (1, 8):
                        runs: dict[str, list[float]] = {"ours": [], "hf": [], "hf1": []}
                        for r in range(repeats + 1):
                            prompts = torch.randint(2, 96, (batch, 8), generator=gen)
                            t0 = time.perf_counter()
                            llm.generate(prompts.tolist(), SamplingParams(temperature=0.0, max_tokens=new_tokens,
                                                                          ignore_eos=True))
                            times = {"ours": time.perf_counter() - t0}
                            for key, n in (("hf", threads), ("hf1", 1)):
                                torch.set_num_threads(n)
                                t0 = time.perf_counter()
                                with torch.inference_mode():
                                    hf.generate(prompts, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                                do_sample=False, eos_token_id=None, pad_token_id=0)
                                times[key] = time.perf_counter() - t0
                            torch.set_num_threads(threads)
                            if r:  # the first run warms up both
                                for key, t in times.items():
                                    runs[key].append(batch * new_tokens / t)
                        a, b, b1 = (statistics.median(runs[k]) for k in ("ours", "hf", "hf1"))
                        print(f"{backend} attention, step_threads {st}, batch {batch}: Recipe {a:.1f} tok/s; "
                              f"transformers {b:.1f} tok/s ({threads} threads), ratio {a / b:.2f}x; "
                              f"transformers {b1:.1f} tok/s (1 thread), ratio {a / b1:.2f}x")
                finally:
                    llm.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="kv,decode")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--attention-backend", default="batched,reference",
                    help="EngineConfig.attention_backend of Recipe's runs, comma-separated: each is measured in turn")
    ap.add_argument("--step-threads", default="auto,off",
                    help="EngineConfig.step_threads of Recipe's runs, comma-separated: each is measured in turn")
    ap.add_argument("--threads", type=int, default=None,
                    help="the thread budget of both sides (default: every core this process may use)")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    if "kv" in parts:
        run_kv()
    if "decode" in parts:
        run_decode(args.repeats, args.new_tokens, args.attention_backend.split(","), args.step_threads.split(","),
                   args.threads or len(os.sched_getaffinity(0)))


if __name__ == "__main__":
    main()
