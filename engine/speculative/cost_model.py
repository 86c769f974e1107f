"""Measured cost of one verification step: seconds as a function of sequences and tokens in the step.

`StepCost` is a least-squares fit t = intercept + per_seq * seqs + per_token * tokens over measured steps
(profiled at start-up by `profile.py`, or loaded from a JSON file written by `save`), with an online
correction: a running ratio of measured to predicted step times. With `points` (the measured steps, kept
by `fit(..., grid=True)`) it predicts by interpolating them instead, in tokens per sequence within each
measured batch size, then across batch sizes, and uses the plane only past the grid's edges: a step's cost
is not linear in its tokens (a few rows cost about one; SmolLM2 at 8 sequences scores 16 tokens for about
the time of 8, where the plane charged a draft token 3-4% of the step), and the policy's choices follow
the marginal cost.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


def isotonic(values: list[float]) -> np.ndarray:
    """The non-decreasing sequence nearest `values` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, n1), (m2, n2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2]
    return np.concatenate([np.full(int(n), m) for m, n in blocks])


@dataclass
class StepCost:
    intercept: float
    per_seq: float
    per_token: float
    correction: float = 1.0
    points: list[tuple[int, int, float]] = field(default_factory=list)  # measured (seqs, tokens, seconds)

    def __post_init__(self) -> None:
        self._rows: list[tuple[int, np.ndarray, np.ndarray]] = []  # per batch size: tokens/seq, seconds
        self._memo: dict[tuple[int, int], float] = {}  # the policy asks for the same few steps every step
        for seqs in sorted({s for s, _, _ in self.points}):
            q = sorted((t / seqs, sec) for s, t, sec in self.points if s == seqs)
            # a longer query never costs less: a faster measurement of a larger step is noise, pooled with its
            # neighbours (isotonic least squares) rather than lifted to the slowest of them
            self._rows.append((seqs, np.array([a for a, _ in q]), isotonic([b for _, b in q])))

    def plane(self, num_seqs: float, num_tokens: float) -> float:
        return self.intercept + self.per_seq * num_seqs + self.per_token * num_tokens

    def predict(self, num_seqs: int, num_tokens: int) -> float:
        return max(self._raw(num_seqs, num_tokens), 1e-6) * self.correction

    def _raw(self, num_seqs: int, num_tokens: int) -> float:
        if not self._rows or num_seqs <= 0:
            return self.plane(num_seqs, num_tokens)
        key = (num_seqs, num_tokens)
        if key not in self._memo:
            self._memo[key] = self._interpolate(num_seqs, num_tokens)
        return self._memo[key]

    def _interpolate(self, num_seqs: int, num_tokens: int) -> float:
        q = num_tokens / num_seqs
        sizes = [s for s, _, _ in self._rows]
        s_in = min(max(num_seqs, sizes[0]), sizes[-1])
        lo_q = max(float(r[1][0]) for r in self._rows)
        hi_q = min(float(r[1][-1]) for r in self._rows)
        q_in = min(max(q, lo_q), hi_q)
        grid = float(np.interp(s_in, sizes, [float(np.interp(q_in, qs, ts)) for _, qs, ts in self._rows]))
        return grid + self.plane(num_seqs, num_tokens) - self.plane(s_in, s_in * q_in)

    def observe(self, num_seqs: int, num_tokens: int, seconds: float, weight: float = 0.05) -> None:
        """Fold one measured step into the correction ratio (exponential average)."""
        predicted = self.predict(num_seqs, num_tokens) / self.correction
        ratio = min(max(seconds / predicted, 0.1), 10.0)
        self.correction += weight * (ratio - self.correction)

    @classmethod
    def fit(cls, samples: list[tuple[int, int, float]], grid: bool = False) -> StepCost:
        """Least squares over (seqs, tokens, seconds); slopes are clipped at zero (time never falls).

        `grid`: keep the samples too and predict by interpolating them (the plane extrapolates)."""
        assert samples
        a = np.array([[1.0, s, t] for s, t, _ in samples])
        y = np.array([sec for _, _, sec in samples])
        coef = np.linalg.lstsq(a, y, rcond=None)[0]
        intercept, per_seq, per_token = (float(c) for c in coef)
        per_seq, per_token = max(per_seq, 0.0), max(per_token, 0.0)
        if per_seq == 0.0 or per_token == 0.0:  # refit the intercept for the clipped slopes
            intercept = float(np.mean(y - per_seq * a[:, 1] - per_token * a[:, 2]))
        points = [(int(s), int(t), float(sec)) for s, t, sec in samples] if grid else []
        return cls(max(intercept, 0.0), per_seq, per_token, points=points)

    def save(self, path: str | Path) -> None:
        data = {k: v for k, v in asdict(self).items() if k != "points"} | {"correction": 1.0}
        if self.points:
            data["points"] = [list(p) for p in self.points]
        Path(path).write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> StepCost:
        """A file without "points" gives the plane alone."""
        data = json.loads(Path(path).read_text())
        points = [(int(s), int(t), float(sec)) for s, t, sec in data.get("points", [])]
        return cls(float(data["intercept"]), float(data["per_seq"]), float(data["per_token"]), points=points)
