"""Drafting with a learned head (`draft_head.py`) chained on the target's last hidden state.

The model runner leaves, for every sequence it sampled, the hidden state of the position whose logits gave
the sequence's last token (`hidden` here, filled through `ModelRunner.hidden_sink`). Confidences: the
head's probability of its own token, calibrated per (probability bin, position) by acceptance counts of
verified drafts, starting from the counts measured on held-out text by the training script.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from recipe.engine.sequence import Sequence
from recipe.engine.speculative.draft_head import DraftHead, DraftProjection
from recipe.engine.speculative.drafter import Draft

BINS = 10


class BinCalibration:
    """P(accept | head probability bin, position), counted; the prior is the bin's centre, weight 2."""

    def __init__(self, max_len: int, counts: dict[str, list[int]] | None = None) -> None:
        self.max_len = max_len
        self.tried = [[0] * BINS for _ in range(max_len)]
        self.accepted = [[0] * BINS for _ in range(max_len)]
        for key, (t, a) in (counts or {}).items():
            j, b = (int(x) for x in key.split(","))
            if j < max_len:
                self.tried[j][b], self.accepted[j][b] = t, a

    @staticmethod
    def bin_of(p: float) -> int:
        return min(int(p * BINS), BINS - 1)

    def confidence(self, j: int, p: float) -> float:
        j, b = min(j, self.max_len - 1), self.bin_of(p)
        return (self.accepted[j][b] + 2 * (b + 0.5) / BINS) / (self.tried[j][b] + 2)

    def record(self, j: int, p: float, accepted: bool) -> None:
        j, b = min(j, self.max_len - 1), self.bin_of(p)
        self.tried[j][b] += 1
        self.accepted[j][b] += int(accepted)

    def counts(self) -> dict[str, list[int]]:
        return {f"{j},{b}": [self.tried[j][b], self.accepted[j][b]]
                for j in range(self.max_len) for b in range(BINS) if self.tried[j][b]}


def embedder(model: Any) -> Any:
    """The target's token embedding as a function of ids."""
    if hasattr(model, "embed_tokens"):
        return model.embed_tokens
    return lambda ids: model.embed[ids]  # the engine tests' tiny model


class DraftHeadDrafter:
    """`full_vocab`: score drafts over the target's whole vocabulary even where the head has a reduced one."""

    def __init__(self, model: Any, head: DraftHead, calibration: BinCalibration, full_vocab: bool = False) -> None:
        self.model, self.head, self.calibration = model, head, calibration
        self.embed = embedder(model)
        self.project = DraftProjection(model, None if full_vocab else head.vocab)
        self.hidden: dict[int, torch.Tensor] = {}  # seq_id -> hidden state behind its last token
        # the chain stops once every row's survival (product of calibrated confidences) is below this: each
        # position costs an LM-head pass, and "auto" never verifies a token below its break-even survival
        self.min_survival = 0.0

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        keep = {s.seq_id for s in seqs}
        for seq_id in [k for k in self.hidden if k not in keep]:
            del self.hidden[seq_id]
        rows = [i for i, (s, n) in enumerate(zip(seqs, max_lens, strict=True)) if n > 0 and s.seq_id in self.hidden]
        out = [Draft() for _ in seqs]
        if not rows:
            return out
        dtype = next(self.head.parameters()).dtype
        h = torch.stack([self.hidden[seqs[i].seq_id] for i in rows]).to(dtype)
        x = torch.tensor([seqs[i].token_ids[-1] for i in rows], device=h.device)
        tokens, probs = [], []
        survival = [1.0] * len(rows)
        for j in range(max(max_lens[i] for i in rows)):
            h = self.head(h, self.embed(x).to(dtype))
            p, x = self.project(h)
            tokens.append(x.tolist())
            probs.append(p.tolist())
            survival = [s * self.calibration.confidence(j, q) for s, q in zip(survival, probs[-1], strict=True)]
            if max(survival) < self.min_survival:
                break
        for r, i in enumerate(rows):
            n = min(max_lens[i], len(tokens))
            ids = [tokens[j][r] for j in range(n)]
            raw = [probs[j][r] for j in range(n)]
            out[i] = Draft(ids, [self.calibration.confidence(j, p) for j, p in enumerate(raw)], raw=raw)
        return out

    def observe(self, draft: Draft, num_accepted: int) -> None:
        for j in range(min(len(draft.raw), num_accepted + 1)):
            self.calibration.record(j, draft.raw[j], j < num_accepted)


def load_head_drafter(model: Any, model_name: str, dtype: torch.dtype, max_len: int = 16,
                      full_vocab: bool = False) -> DraftHeadDrafter:
    """The shipped head for `model_name` (ValueError when none was trained for it); `full_vocab`: ignore its
    reduced draft vocabulary (its calibration was counted with it)."""
    from recipe.engine.speculative.draft_head import weights_path
    from safetensors import safe_open

    path = weights_path(model_name)
    if not path.exists():
        raise ValueError(f"speculative='draft-head': no draft head was trained for model {model_name!r} ({path})")
    head = DraftHead.load(path, dtype)
    with safe_open(str(path), framework="pt") as f:
        counts = json.loads(f.metadata().get("calibration", "{}"))
    return DraftHeadDrafter(model, head, BinCalibration(max_len, counts), full_vocab)
