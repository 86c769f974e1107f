"""Train the draft head (engine/speculative/draft_head.py) for SmolLM2 on the model's own greedy outputs.

    python scripts/train_draft_head.py                 # writes engine/speculative/weights/smollm2_draft_head.safetensors
    python scripts/train_draft_head.py --minutes 2     # a shorter training budget

1. Corpus, built here: chat questions, code-rewrite requests over this repository's tests/ files (the benchmark
   uses the other folders), and JSON requests; SmolLM2 answers each greedily (the engine, no speculation).
2. Teacher forcing: one forward over each prompt + answer gives the final hidden state h_t of every position;
   the head learns (h_t, embedding of x_{t+1}) -> h_{t+1} (smooth L1) and, through the frozen LM head, the
   model's greedy token at t+2 (cross-entropy on a sample of each batch, the LM head being the costly part).
3. Held-out sequences (every 10th) calibrate the confidences: chained drafts of 8 tokens from each position,
   acceptance counted per (position, probability bin), stored in the weights' metadata.
Seed 0; fp16 weights (about 4 MB).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from recipe.engine import LLM, SamplingParams
from recipe.engine.context import AttentionContext, reset_context, set_context
from recipe.engine.speculative.draft_head import DraftHead, weights_path
from recipe.engine.speculative.head_drafter import BinCalibration
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parent.parent
SUBJECTS = ["tides", "origami", "bread baking", "the Silk Road", "magnets", "dinosaurs", "tea ceremonies",
            "satellites", "coral reefs", "the metric system", "bicycles", "lightning", "penguins", "windmills",
            "the alphabet", "earthquakes", "mushrooms", "pianos", "deserts", "submarines", "honey", "comets",
            "libraries", "rainforests", "maps", "clocks", "bridges", "whales", "paper", "glass"]


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def corpus(limit_code: int) -> list[str]:
    prompts = [chat(f"Tell me about {s}.") for s in SUBJECTS]
    prompts += [chat(f"Write a JSON object describing {s} with fields name, summary and facts.") for s in SUBJECTS]
    files = sorted((ROOT / "tests").rglob("*.py"))[:limit_code]
    for path in files:
        text = "\n".join(path.read_text().splitlines()[:30])
        prompts.append(chat(f"Rewrite this Python file, adding a docstring to every function. Output the whole "
                            f"file.\n\n{text}"))
    return prompts


@torch.inference_mode()
def hidden_states(llm: LLM, ids: list[int]) -> torch.Tensor:
    """Final hidden states [L, H] of every position (one prefill over free KV blocks; prefix caching is off)."""
    runner = llm.engine.runner
    bs, n = runner.block_size, len(ids)
    table = np.arange(-(-n // bs), dtype=np.int64)
    pos = np.arange(n, dtype=np.int64)
    set_context(AttentionContext(
        query_lens=[n], context_lens_list=[n], cu_seqlens_q=torch.tensor([0, n]),
        context_lens=torch.tensor([n]), slot_mapping=torch.from_numpy(table[pos // bs] * bs + pos % bs),
        block_tables=torch.from_numpy(table[None]), block_size=bs, attention_backend=runner.attention_backend))
    try:
        return runner.model.forward(torch.tensor(ids), torch.from_numpy(pos)).float()
    finally:
        reset_context()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    ap.add_argument("--tokens", type=int, default=64, help="greedy answer length")
    ap.add_argument("--code-files", type=int, default=30)
    ap.add_argument("--inner", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(weights_path("smollm2")))
    args = ap.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(args.threads)
    llm = LLM("smollm2", num_threads=args.threads, enable_prefix_caching=False, kv_cache_bytes=512 << 20,
              max_num_batched_tokens=4096)
    model = llm.engine.runner.model
    t0 = time.perf_counter()
    prompts = [llm.encode(p) for p in corpus(args.code_files)]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=args.tokens))
    seqs = [p + list(o.new_token_ids) for p, o in zip(prompts, outs, strict=True)]
    print(f"corpus: {len(seqs)} sequences, {sum(map(len, seqs))} tokens, greedy answers in {time.perf_counter() - t0:.0f} s")
    h_in, e_in, h_out, labels, held = [], [], [], [], []
    with torch.inference_mode():
        for i, ids in enumerate(seqs):
            h = hidden_states(llm, ids)
            greedy = model.compute_logits(h).argmax(-1)  # the model's own next token at every position
            if i % 10 == 0:
                held.append((h, ids, greedy))
                continue
            h_in.append(h[:-2])
            e_in.append(model.embed_tokens(torch.tensor(ids[1:-1])).float())
            h_out.append(h[1:-1])
            labels.append(greedy[1:-1])
    h_in_t, e_in_t, h_out_t, labels_t = (torch.cat(x) for x in (h_in, e_in, h_out, labels))
    print(f"training pairs: {len(labels_t)}; held-out sequences: {len(held)}")
    head = DraftHead(h_in_t.shape[1], args.inner)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3, weight_decay=0.0)
    lm_head = (model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight).detach().float()
    deadline, step, epoch = time.perf_counter() + 60 * args.minutes, 0, 0
    while time.perf_counter() < deadline:
        order = torch.randperm(len(labels_t))
        for b in range(0, len(order), 256):
            idx = order[b:b + 256]
            pred = head(h_in_t[idx], e_in_t[idx])
            loss = F.smooth_l1_loss(pred, h_out_t[idx])
            ce_idx = idx[:64]
            loss = loss + 0.1 * F.cross_entropy(pred[:64] @ lm_head.T, labels_t[ce_idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if time.perf_counter() > deadline:
                break
        epoch += 1
    print(f"trained {step} steps ({epoch} epoch(s) begun), last loss {loss.item():.4f}")
    calibration = BinCalibration(16)
    head.eval()
    with torch.inference_mode():
        accepted_by_pos = [[0, 0] for _ in range(8)]
        for h, ids, greedy in held:
            for t in range(0, len(ids) - 10, 3):
                hh, x = h[t:t + 1], torch.tensor([ids[t + 1]])
                for j in range(8):
                    hh = head(hh, model.embed_tokens(x).float())
                    p, x = torch.softmax(hh @ lm_head.T, -1).max(-1)
                    truth = int(greedy[t + 1 + j])  # what the target would emit at this position
                    ok = int(x) == truth
                    calibration.record(j, float(p), ok)
                    accepted_by_pos[j][0] += 1
                    accepted_by_pos[j][1] += ok
                    if not ok:
                        break
    print("held-out conditional acceptance per position:",
          [round(a / t, 3) if t else None for t, a in accepted_by_pos])
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    head.save(path)
    from safetensors.torch import load_file, save_file

    meta = {"hidden_size": str(h_in_t.shape[1]), "inner_size": str(args.inner), "seed": "0",
            "calibration": json.dumps(calibration.counts())}
    save_file(load_file(str(path)), str(path), metadata=meta)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    llm.shutdown()


if __name__ == "__main__":
    main()
