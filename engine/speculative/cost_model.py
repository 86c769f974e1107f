"""Measured cost of one verification step: seconds as a function of sequences and tokens in the step.

`StepCost` is a least-squares fit t = intercept + per_seq * seqs + per_token * tokens over measured steps
(profiled at start-up by `profile.py`, or loaded from a JSON file written by `save`), with an online
correction: a running ratio of measured to predicted step times.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass
class StepCost:
    intercept: float
    per_seq: float
    per_token: float
    correction: float = 1.0

    def predict(self, num_seqs: int, num_tokens: int) -> float:
        raw = self.intercept + self.per_seq * num_seqs + self.per_token * num_tokens
        return max(raw, 1e-6) * self.correction

    def observe(self, num_seqs: int, num_tokens: int, seconds: float, weight: float = 0.05) -> None:
        """Fold one measured step into the correction ratio (exponential average)."""
        predicted = self.predict(num_seqs, num_tokens) / self.correction
        ratio = min(max(seconds / predicted, 0.1), 10.0)
        self.correction += weight * (ratio - self.correction)

    @classmethod
    def fit(cls, samples: list[tuple[int, int, float]]) -> StepCost:
        """Least squares over (seqs, tokens, seconds); slopes are clipped at zero (time never falls)."""
        assert samples
        a = np.array([[1.0, s, t] for s, t, _ in samples])
        y = np.array([sec for _, _, sec in samples])
        coef = np.linalg.lstsq(a, y, rcond=None)[0]
        intercept, per_seq, per_token = (float(c) for c in coef)
        per_seq, per_token = max(per_seq, 0.0), max(per_token, 0.0)
        if per_seq == 0.0 or per_token == 0.0:  # refit the intercept for the clipped slopes
            intercept = float(np.mean(y - per_seq * a[:, 1] - per_token * a[:, 2]))
        return cls(max(intercept, 0.0), per_seq, per_token)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self) | {"correction": 1.0}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> StepCost:
        data = json.loads(Path(path).read_text())
        return cls(float(data["intercept"]), float(data["per_seq"]), float(data["per_token"]))
