"""Drafting with a learned head (`draft_head.py`) chained on the target's last hidden state.

Each step's result carries, for every sequence it sampled, the hidden state of the position whose logits gave
the sequence's last token (`StepResult.hidden`); `after_step` keeps it per sequence (`hidden` here). Confidences: the
head's probability of its own token, calibrated per (probability bin, position) by acceptance counts of
verified drafts, starting from the counts measured on held-out text by the training script.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from recipe.engine.sequence import Sequence
from recipe.engine.speculative.calibration import BinCalibration
from recipe.engine.speculative.chain_budget import ChainBudget, chain_on
from recipe.engine.speculative.draft_head import DraftHead, DraftProjection, quantized
from recipe.engine.speculative.drafter import Draft
from recipe.engine.speculative.native_draft_head import NativeDraftHead
from recipe.engine.step import PreparedStep, StepResult
from torch import nn
from torch.nn import functional as F


def embedder(model: Any) -> Any:
    """The target's token embedding as a function of ids."""
    module = getattr(model, "embed_tokens", None)
    if isinstance(module, nn.Embedding):  # its table read at each call (weights may move, e.g. to huge pages)
        return lambda ids: F.embedding(ids, module.weight)
    if module is not None:
        return module
    return lambda ids: model.embed[ids]  # the engine tests' tiny model


class DraftHeadDrafter:
    """`full_vocab`: score drafts over the target's whole vocabulary even where the head has a reduced one.
    `q8_0`: draft with Q8_0 copies of the head and of its vocabulary's LM-head rows (`draft_head.quantized`), run as
    one native call a position (`native_draft_head.py`) where it applies."""

    def __init__(self, model: Any, head: DraftHead, calibration: BinCalibration, full_vocab: bool = False,
                 q8_0: bool = False) -> None:
        self.model, self.head, self.calibration = model, quantized(head) if q8_0 else head, calibration
        self.embed = embedder(model)
        self.project = DraftProjection(model, None if full_vocab else head.vocab, q8_0)
        # q8_0: the whole position in one native call where the library and the head's shapes allow
        self.native = NativeDraftHead.build(self.head, self.project) if q8_0 else None
        self.dtype = next(self.head.parameters()).dtype
        self.hidden: dict[int, torch.Tensor] = {}  # seq_id -> hidden state behind its last token
        # the chain stops once every row's survival (product of calibrated confidences) is below this: each
        # position costs an LM-head pass, and "auto" never verifies a token below its break-even survival
        self.min_survival = 0.0
        # set by "auto" with the drafter's time priced: the chain goes on only while its next position pays for
        # itself (drafting and verifying it against the step's expected rate); it then replaces `min_survival`
        self.chain: ChainBudget | None = None

    def after_step(self, step: PreparedStep, result: StepResult) -> None:
        if result.hidden is not None:
            self.hidden.update(zip(step.sample_seq_ids, result.hidden.unbind(0), strict=True))

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        keep = {s.seq_id for s in seqs}
        for seq_id in [k for k in self.hidden if k not in keep]:
            del self.hidden[seq_id]
        rows = [i for i, (s, n) in enumerate(zip(seqs, max_lens, strict=True)) if n > 0 and s.seq_id in self.hidden]
        out = [Draft() for _ in seqs]
        if not rows:
            return out
        dtype = self.dtype
        h = (self.hidden[seqs[rows[0]].seq_id][None] if len(rows) == 1
             else torch.stack([self.hidden[seqs[i].seq_id] for i in rows])).to(dtype)
        x = torch.tensor([seqs[i].token_ids[-1] for i in rows], device=h.device)
        tokens, probs = [], []
        survival = [1.0] * len(rows)
        longest = max(max_lens[i] for i in rows)
        for j in range(longest):
            if self.native is not None:
                h, p, x = self.native(h, self.embed(x))
            else:
                h = self.head(h, self.embed(x).to(dtype))
                p, x = self.project(h)
            tokens.append(x.tolist())
            probs.append(p.tolist())
            survival = self.calibration.survive(survival, j, probs[-1])
            if j + 1 < longest and not chain_on(self.chain, self.min_survival, self.calibration, survival, j):
                break
        for r, i in enumerate(rows):
            n = min(max_lens[i], len(tokens))
            out[i] = self.calibration.draft([tokens[j][r] for j in range(n)], [probs[j][r] for j in range(n)])
        return out

    def observe(self, draft: Draft, num_accepted: int) -> None:
        self.calibration.observe(draft, num_accepted)


def load_head_drafter(model: Any, model_name: str, dtype: torch.dtype, max_len: int = 16,
                      full_vocab: bool = False, offline_weight: float | None = None,
                      q8_0: bool = False) -> DraftHeadDrafter:
    """The shipped head for `model_name` (ValueError when none was trained for it); `full_vocab`: ignore its
    reduced draft vocabulary (its calibration was counted with it); `offline_weight`: see `BinCalibration`."""
    from recipe.engine.speculative.draft_head import weights_path
    from safetensors import safe_open

    path = weights_path(model_name)
    if not path.exists():
        raise ValueError(f"speculative='draft-head': no draft head was trained for model {model_name!r} ({path})")
    head = DraftHead.load(path, dtype)
    with safe_open(str(path), framework="pt") as f:
        counts = json.loads(f.metadata().get("calibration", "{}"))
    return DraftHeadDrafter(model, head, BinCalibration(max_len, counts, offline_weight), full_vocab, q8_0)
