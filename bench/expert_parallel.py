"""Expert parallelism and EPLB figures.

    .venv/bin/python bench/expert_parallel.py [--seed N] [--ranks 2,4] [--iters 20]

1. Rank imbalance (max / mean expert rows per rank) before EPLB (the checkpoint's contiguous placement)
   and after (`plan_placement`), on
   - a routing trace recorded from real inference: a tiny DeepSeek-V3 (32 routed experts, top-4, three MoE
     layers, random weights written by `transformers`) generating from random prompts through `LLM`, with
     the engine's expert-load recorder installed; the placement is planned on the first half of the
     requests and measured on the second half (held out) as well as on the planning half;
   - a synthetic Zipf trace (256 experts, s = 1.0 and 1.2) at 8, 32 ranks with 32 redundant replicas.
2. All-to-all time per MoE layer against the layer's local expert compute, at EP 2 and 4 (gloo, one
   process per rank on this machine), from the layers' own timers.
3. A simulation at 64 and 144 ranks: 256 experts whose loads are drawn from the recorded per-expert load
   shares, with 32 redundant replicas (DeepSeek's Day-6 layout), imbalance before and after.
Figures on a shared, loaded machine: the timings are ratios measured in one run, side by side.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from recipe.engine.expert_parallel.eplb_planner import plan_placement
from recipe.engine.expert_parallel.placement import Placement, default_placement

TINY_V3 = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=32,
    kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
    n_group=8, topk_group=4, num_experts_per_tok=4, first_k_dense_replace=1, max_position_embeddings=512,
    routed_scaling_factor=2.5, bos_token_id=0, eos_token_id=1,
)


def write_tiny_v3(path: Path, seed: int) -> Path:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**TINY_V3))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 1.0 if "gate.weight" in name else 0.08)
        g = torch.Generator().manual_seed(seed)
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.05)
    model.save_pretrained(path)
    return path


def record_trace(path: Path, seed: int, requests: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-layer expert loads [layers, experts] of two halves of `requests` random-prompt generations."""
    from recipe.engine.expert_parallel.load_recorder import ExpertLoadRecorder
    from recipe.engine.llm import LLM
    from recipe.engine.sampling_params import SamplingParams

    rng = random.Random(seed)
    llm = LLM(str(path), num_kv_blocks=256, async_scheduling=False)
    recorder = ExpertLoadRecorder(llm.engine.model)
    halves = []
    for _ in range(2):
        prompts = [[rng.randrange(2, 256) for _ in range(rng.randint(8, 48))] for _ in range(requests // 2)]
        llm.generate(prompts, SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True))
        halves.append(recorder.counts.clone())
        recorder.reset()
    llm.shutdown()
    return halves[0], halves[1]


def imbalance_rows(name: str, plan_loads: torch.Tensor, eval_loads: torch.Tensor, ranks: int, budget: int) -> None:
    """Mean over layers of the imbalance, before (contiguous) and after EPLB (planned on `plan_loads`)."""
    before, after = [], []
    for layer in range(plan_loads.shape[0]):
        plan, ev = plan_loads[layer].tolist(), eval_loads[layer].tolist()
        before.append(default_placement(len(plan), ranks).imbalance(ev))
        after.append(plan_placement(plan, ranks, budget).imbalance(ev))
    print(f"  {name:<44} ranks {ranks:>3}  redundant {budget:>3}  imbalance before "
          f"{statistics.mean(before):5.2f}  after {statistics.mean(after):5.2f}")


def zipf(n: int, s: float, tokens: int, seed: int) -> list[float]:
    """Expert loads of `tokens` draws from a Zipf(s) popularity over `n` experts in a random order."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** s for k in range(n)]
    rng.shuffle(weights)
    counts = [0.0] * n
    for e in rng.choices(range(n), weights=weights, k=tokens):
        counts[e] += 1
    return counts


def resampled(shares: list[float], n: int, seed: int) -> list[float]:
    """`n` expert loads drawn (with replacement) from the recorded per-expert load shares."""
    rng = random.Random(seed)
    return [rng.choice(shares) for _ in range(n)]


def timing_rank(rank: int, world: int, tokens: int, iters: int, seed: int) -> dict[str, Any]:
    """Rank program: one MoE layer (256 experts over the ranks, H=1024, I=256, top-8), `tokens` per rank per
    step with balanced random routing; all-to-all seconds (layer timer) against local expert compute."""
    from recipe.engine.expert_parallel.ep_moe import ExpertParallelMoE
    from recipe.engine.expert_parallel.sharded_weights import resize_slots
    from recipe.engine.layers.routed_experts import RoutedExperts, expert_rows, silu_and_mul

    hidden, inter, experts, k = 1024, 256, 256, 8
    placement = default_placement(experts, world)
    with torch.device("meta"):
        module = RoutedExperts(hidden, inter, experts, silu_and_mul)
    module.to_empty(device="cpu")
    resize_slots(module, placement.slots[rank])
    g = torch.Generator().manual_seed(seed + rank)
    with torch.no_grad():
        module.w_gate_up.normal_(0, 0.02, generator=g)
        module.w_down.normal_(0, 0.02, generator=g)
    ep = ExpertParallelMoE(rank, world, placement)
    module.expert_parallel = ep
    comm, compute = [], []
    with torch.inference_mode():
        for it in range(iters + 2):
            x = torch.randn(tokens, hidden, generator=g)
            ids = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)])
            w = torch.rand(tokens, k, generator=g)
            ep.traffic.timer.seconds = 0.0
            start = time.perf_counter()
            module.routed(x, w, ids)
            total = time.perf_counter() - start
            rows = torch.randn(ep.traffic.rows_computed, hidden, generator=g)  # the same local work, alone
            slots = torch.randint(0, placement.slots_per_rank, (rows.shape[0],), generator=g)
            ep.traffic.rows_computed = 0
            t0 = time.perf_counter()
            expert_rows(rows, slots, module.w_gate_up, module.w_down, silu_and_mul)
            local = time.perf_counter() - t0
            if it >= 2:  # warm-up excluded
                comm.append(ep.traffic.timer.seconds)
                compute.append(local)
            del total
    return {"comm": statistics.median(comm), "compute": statistics.median(compute)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=600, help="generations recorded; the plan is made on the first half and measured on the second")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}")
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_v3(Path(tmp) / "tiny_v3", seed)
        first, second = record_trace(path, seed, args.requests)
    print(f"1. recorded trace: tiny DeepSeek-V3, {first.shape[0]} MoE layers x {first.shape[1]} experts, "
          f"{int(first.sum() + second.sum())} (token, expert) rows")
    for ranks, budget in ((4, 0), (4, 4), (4, 8), (8, 8), (8, 16)):
        imbalance_rows("recorded, planned on half 1, measured half 2", first, second, ranks, budget)
        imbalance_rows("recorded, planned and measured on half 1", first, first, ranks, budget)
    print("   synthetic Zipf trace, 256 experts, 200k rows (planned on one draw, measured on another)")
    for s in (1.0, 1.2):
        plan_l = torch.tensor([zipf(256, s, 200_000, seed)])
        eval_l = torch.tensor([zipf(256, s, 200_000, seed)])  # same popularity, fresh draws
        for ranks, budget in ((8, 32), (32, 32), (32, 64)):
            imbalance_rows(f"zipf s={s}", plan_l, eval_l, ranks, budget)
    shares = (first + second).float()
    shares = (shares / shares.sum(dim=1, keepdim=True)).flatten().tolist()
    print("3. simulation: 256 experts with loads drawn from the recorded shares, 32 redundant replicas")
    for ranks in (64, 144):
        load = torch.tensor([resampled(shares, 256, seed + ranks)])
        imbalance_rows("recorded shares, resampled", load, load, ranks, 32)
        p: Placement = plan_placement(load[0].tolist(), ranks, 32)
        w = load[0].tolist()
        bound = max(x / c for x, c in zip(w, p.replicas(), strict=True)) / (sum(w) / ranks)
        print(f"      slots per rank {p.slots_per_rank}, max replicas of one expert {max(p.replicas())}; bound for "
              f"this budget {max(1.0, bound):.2f} (the largest per-replica load / mean rank load: replica counts "
              f"minimise it, and no placement of them can go below it)")
    print(f"2. all-to-all vs local expert compute per MoE layer (H=1024, I=256, 256 experts, top-8, "
          f"{args.tokens} tokens per rank, gloo, median of {args.iters}):")
    from recipe.engine.expert_parallel.process_group import run_ranks

    for world in (int(r) for r in args.ranks.split(",")):
        res = run_ranks(timing_rank, world, (args.tokens, args.iters, seed), timeout_s=600)
        comm = max(r["comm"] for r in res)
        compute = max(r["compute"] for r in res)
        print(f"  EP {world}: all-to-all {comm * 1e3:7.2f} ms  expert compute {compute * 1e3:7.2f} ms  "
              f"ratio all-to-all / compute {comm / compute:5.2f}")


if __name__ == "__main__":
    main()
