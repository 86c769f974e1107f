"""Step-time curves: what one engine step costs, as measured on this engine (or stated for other hardware).

A step runs `prefill_tokens` prompt tokens and `batch` decode rows over `context` cached tokens in all:
    time = [prefill_tokens > 0] * (prefill_base + prefill_per_token * prefill_tokens)
         + [batch > 0] * (decode_base + decode_per_seq * batch + decode_per_ctx * context)
A colocated step that mixes both pays both parts: that is the interference disaggregation removes.
`transfer_per_token` is the KV hand-off time per prompt token (0 for a colocated instance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepCurves:
    prefill_base: float
    prefill_per_token: float
    decode_base: float
    decode_per_seq: float
    decode_per_ctx: float
    transfer_per_token: float = 0.0
    transfer_base: float = 0.0

    def step(self, prefill_tokens: int, batch: int, context: int) -> float:
        t = 0.0
        if prefill_tokens > 0:
            t += self.prefill_base + self.prefill_per_token * prefill_tokens
        if batch > 0:
            t += self.decode_base + self.decode_per_seq * batch + self.decode_per_ctx * context
        return t

    def transfer(self, prompt_tokens: int) -> float:
        return self.transfer_base + self.transfer_per_token * prompt_tokens

    @classmethod
    def fit(cls, prefill: Sequence[tuple[int, float]], decode: Sequence[tuple[int, int, float]],
            transfer_per_token: float = 0.0, transfer_base: float = 0.0) -> StepCurves:
        """Least squares over measured (tokens, seconds) prefill points and (batch, context, seconds) decode
        points; coefficients are clipped at 0 (a curve never gets cheaper with more work)."""
        a = np.array([[1.0, t] for t, _ in prefill])
        pb, pt = np.linalg.lstsq(a, np.array([s for _, s in prefill]), rcond=None)[0]
        d = np.array([[1.0, b, c] for b, c, _ in decode])
        db, ds, dc = np.linalg.lstsq(d, np.array([s for _, _, s in decode]), rcond=None)[0]
        return cls(max(0.0, float(pb)), max(0.0, float(pt)), max(0.0, float(db)), max(0.0, float(ds)),
                   max(0.0, float(dc)), transfer_per_token, transfer_base)
