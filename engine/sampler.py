"""Token sampling, vectorised over the batch.

Per row, in this order (the order of `transformers.generate`): constraint bitmask, repetition penalty
(prompt and output tokens), presence/frequency penalties (output tokens, OpenAI's formula), temperature,
top-k, top-p, min-p; then greedy rows take the argmax and the others sample by the exponential race
(argmax of probs / Exp(1) noise), whose noise comes from a generator seeded by (seed, choice, position)
for seeded rows, so a seeded request gives the same tokens whatever else is in the batch.
Logprobs are those of the model's raw distribution.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np
import torch
from recipe.engine.outputs import TokenLogprob
from recipe.engine.sampling_params import SamplingParams

_BIT_SHIFTS = torch.arange(32, dtype=torch.int32)


@dataclass
class SamplingRow:
    """What the sampler needs about one row: its parameters, seed key and (only if penalised) history."""

    params: SamplingParams
    index: int = 0  # choice index, part of the seed key
    position: int = 0  # position of the token being sampled, part of the seed key
    output_ids: list[int] | None = None  # for presence/frequency penalties
    context_ids: list[int] | None = None  # prompt + output, for the repetition penalty


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[TokenLogprob | None]


def seed_for(seed: int, index: int, position: int) -> int:
    """A 63-bit generator seed from (request seed, choice index, token position)."""
    digest = hashlib.blake2b(struct.pack("<qqq", seed, index, position), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Packed int32 [B, ceil(V/32)] (bit j of word w allows token 32w + j) -> bool [B, V]."""
    bits = (bitmask.unsqueeze(-1) >> _BIT_SHIFTS.to(bitmask.device)) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


def _pad(rows: list[list[int]], pad: int, device: torch.device) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out).to(device)


class Sampler:
    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device)
        self.generator.seed()

    def process_logits(self, logits: torch.Tensor, rows: list[SamplingRow],
                       bitmask: torch.Tensor | None = None) -> torch.Tensor:
        """Apply masks, penalties, temperature and top-k/top-p/min-p; returns fp32 logits [B, V] (a new tensor,
        or the given fp32 one where every row is greedy, unmasked and unpenalised)."""
        if bitmask is None and all(r.params.greedy and r.params.repetition_penalty == 1.0 and not
                                   (r.params.presence_penalty or r.params.frequency_penalty) for r in rows):
            return logits.float()  # nothing to apply: the argmax reads them as they are (no copy)
        logits = logits.float().clone()
        _B, V = logits.shape
        dev = logits.device
        if bitmask is not None:
            allowed = unpack_bitmask(bitmask.to(dev), V)
            allowed |= ~allowed.any(dim=1, keepdim=True)  # an empty mask (finished matcher) masks nothing
            logits.masked_fill_(~allowed, float("-inf"))
        rep = [i for i, r in enumerate(rows) if r.params.repetition_penalty != 1.0]
        if rep:
            ids = _pad([rows[i].context_ids or [] for i in rep], V, dev)
            seen = torch.zeros(len(rep), V + 1, dtype=torch.bool, device=dev).scatter_(1, ids, True)[:, :V]
            pen = torch.tensor([rows[i].params.repetition_penalty for i in rep], device=dev).unsqueeze(1)
            sub = logits[rep]
            logits[rep] = torch.where(seen, torch.where(sub < 0, sub * pen, sub / pen), sub)
        freq = [i for i, r in enumerate(rows) if r.params.presence_penalty or r.params.frequency_penalty]
        if freq:
            ids = _pad([rows[i].output_ids or [] for i in freq], V, dev)
            counts = torch.zeros(len(freq), V + 1, device=dev).scatter_add_(
                1, ids, torch.ones_like(ids, dtype=torch.float32))[:, :V]
            fp = torch.tensor([rows[i].params.frequency_penalty for i in freq], device=dev).unsqueeze(1)
            pp = torch.tensor([rows[i].params.presence_penalty for i in freq], device=dev).unsqueeze(1)
            logits[freq] -= fp * counts + pp * (counts > 0)
        warp = [i for i, r in enumerate(rows) if not r.params.greedy]
        if not warp:
            return logits
        sub = logits[warp]
        ps = [rows[i].params for i in warp]
        temp = torch.tensor([p.temperature for p in ps], device=dev).unsqueeze(1)
        sub = sub / temp
        if any(p.top_k > 0 for p in ps):
            k = torch.tensor([p.top_k if p.top_k > 0 else V for p in ps], device=dev).clamp(max=V)
            kth = sub.topk(int(k.max()), dim=1).values.gather(1, (k - 1).unsqueeze(1))
            sub = sub.masked_fill(sub < kth, float("-inf"))
        if any(p.top_p < 1.0 for p in ps):
            top_p = torch.tensor([p.top_p for p in ps], device=dev).unsqueeze(1)
            sorted_logits, order = sub.sort(dim=1, descending=False)
            cum = sorted_logits.softmax(dim=1).cumsum(dim=1)
            remove_sorted = cum <= (1 - top_p)
            remove_sorted[:, -1] = False
            remove = remove_sorted.scatter(1, order, remove_sorted)
            sub = sub.masked_fill(remove, float("-inf"))
        if any(p.min_p > 0.0 for p in ps):
            min_p = torch.tensor([p.min_p for p in ps], device=dev).unsqueeze(1)
            probs = sub.softmax(dim=1)
            sub = sub.masked_fill(probs < min_p * probs.amax(dim=1, keepdim=True), float("-inf"))
        logits[warp] = sub
        return logits

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow],
                 bitmask: torch.Tensor | None = None) -> SamplerOutput:
        assert logits.shape[0] == len(rows)
        processed = self.process_logits(logits, rows, bitmask)
        tokens = processed.argmax(dim=1)
        rand = [i for i, r in enumerate(rows) if not r.params.greedy]
        if rand:
            probs = processed[rand].softmax(dim=1)
            noise = torch.empty_like(probs)
            unseeded = [j for j, i in enumerate(rand) if rows[i].params.seed is None]
            if unseeded:
                noise[unseeded] = torch.empty(len(unseeded), probs.shape[1], device=probs.device).exponential_(
                    generator=self.generator)
            for j, i in enumerate(rand):
                r = rows[i]
                if r.params.seed is not None:
                    g = torch.Generator(probs.device).manual_seed(seed_for(r.params.seed, r.index, r.position))
                    noise[j].exponential_(generator=g)
            tokens[rand] = (probs / noise).argmax(dim=1)
        token_ids = tokens.tolist()
        return SamplerOutput(token_ids, self._logprobs(logits, rows, token_ids))

    @staticmethod
    def _logprobs(logits: torch.Tensor, rows: list[SamplingRow], token_ids: list[int]) -> list[TokenLogprob | None]:
        out: list[TokenLogprob | None] = [None] * len(rows)
        want = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
        if not want:
            return out
        lp = torch.log_softmax(logits[want].float(), dim=1)
        chosen = lp.gather(1, torch.tensor([[token_ids[i]] for i in want], device=lp.device)).squeeze(1).tolist()
        k = max(rows[i].params.logprobs or 0 for i in want)
        top_v, top_i = (lp.topk(k, dim=1) if k else (lp[:, :0], lp[:, :0].long()))
        top_v_l, top_i_l = top_v.tolist(), top_i.tolist()
        for j, i in enumerate(want):
            n = rows[i].params.logprobs or 0
            out[i] = (chosen[j], list(zip(top_i_l[j][:n], top_v_l[j][:n], strict=True)))
        return out
