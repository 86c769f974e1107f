"""Measured cost of one verification step: seconds as a function of sequences and tokens in the step.

`StepCost` is a least-squares fit t = intercept + per_seq * seqs + per_token * tokens over measured steps
(profiled at start-up by `profile.py`, or loaded from a JSON file written by `save`), with an online
correction: a running ratio of measured to predicted step times. With `points` (the measured steps, kept
by `fit(..., grid=True)`) it predicts by interpolating them instead, in tokens per sequence within each
measured batch size, then across batch sizes, and uses the plane only past the grid's edges: a step's cost
is not linear in its tokens (a few rows cost about one; SmolLM2 at 8 sequences scores 16 tokens for about
the time of 8, where the plane charged a draft token 3-4% of the step), and the policy's choices follow
the marginal cost. With `convex` the grid's times over tokens are fitted convex per batch size, so a profile's
noise does not make one draft token look free and the next dear.

With `learn_cells`, `observe` also learns each measured (sequences, tokens) step's own cost relative to the
running correction: a start-up profile times a short context with a few runs a point, so its marginal costs (what
the policy weighs a draft token against) can be off by a factor of two where the running steps' are measured
hundreds of times. The global correction still follows the machine's drift; a cell's factor is its shape. With
`fit_cells` (the default) a batch size's learned times are fitted again as the profile was (convex or
non-decreasing in tokens), weighted by their observations, with the profile's own points as a weak prior: at 8
sequences a draft row costs ~2 ms of a ~40 ms step, less than the spread between two cells' factors, and the
cells alone priced a 9-token step below an 8-token one and a 13-token step below a 12-token one. Without it an
unmeasured step takes the factor of the nearest measured token counts at its batch size.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

CELL_MIN = 3  # observations before a (seqs, tokens) cell's own factor is used
# a cell's factor: the mean of its first 50 observations, then an exponential average slower than the correction's,
# so the machine's drift goes to the correction, which every cell shares
CELL_WEIGHT = 0.02
REFIT_EVERY = 8  # `fit_cells`: a batch size's cells are fitted again every this many of its observations
PRIOR_WEIGHT = 3.0  # `fit_cells`: a profile point counts as this many observed steps (it is the fastest of 3 runs)


def isotonic(values: list[float], weights: list[float] | None = None) -> np.ndarray:
    """The non-decreasing sequence nearest `values` in (weighted) least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values, weights or [1.0] * len(values), strict=True):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    return np.concatenate([np.full(int(n), m) for m, _, n in blocks])


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin |a x - b| over x >= 0 (Lawson and Hanson's active set)."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    tol = 1e-12 * max(1.0, float(np.abs(a).sum() * np.abs(b).sum()))
    for _ in range(3 * n + 3):
        grad = a.T @ (b - a @ x)
        if passive.all() or float(np.max(np.where(passive, -np.inf, grad))) <= tol:
            break
        passive[int(np.argmax(np.where(passive, -np.inf, grad)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if bool(np.all(z[passive] > 0)):
                break
            neg = passive & (z <= 0)
            alpha = float(np.min(x[neg] / (x[neg] - z[neg])))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = z
    return x


def convex(xs: Sequence[float], values: Sequence[float], weights: Sequence[float] | None = None) -> np.ndarray:
    """The non-decreasing convex function nearest `values` at `xs` (non-decreasing; repeats allowed) in weighted
    least squares, at those xs. A step's time over its tokens is the larger of a flat memory-bound cost and a rising
    compute cost, so its marginal cost never falls; a profile's noise falls on the differences of neighbours, which
    this pools. The fit is c + sum_k d_k (x - x_k)+ over the distinct xs but the last, every d_k >= 0."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(values, dtype=float)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    knots = np.unique(x)[:-1]
    if not len(knots):
        return np.full_like(y, float(np.average(y, weights=w)))
    hinge = np.maximum(x[:, None] - knots[None, :], 0.0)
    # the intercept is free: centre the hinges and the values at their weighted means
    hinge_mean, y_mean = np.average(hinge, axis=0, weights=w), float(np.average(y, weights=w))
    root = np.sqrt(w)[:, None]
    d = nnls(root * (hinge - hinge_mean), root[:, 0] * (y - y_mean))
    return y_mean + (hinge - hinge_mean) @ d


@dataclass
class StepCost:
    intercept: float
    per_seq: float
    per_token: float
    correction: float = 1.0
    points: list[tuple[int, int, float]] = field(default_factory=list)  # measured (seqs, tokens, seconds)
    learn_cells: bool = False  # `observe` learns each measured step's factor over the prediction (see above)
    convex: bool = False  # the grid's times over tokens, per batch size: fitted convex, else non-decreasing
    fit_cells: bool = True  # with `learn_cells`: a batch size's learned times fitted as the grid's (see above)

    def __post_init__(self) -> None:
        self._rows: list[tuple[int, np.ndarray, np.ndarray]] = []  # per batch size: tokens/seq, seconds
        self._memo: dict[tuple[int, int], float] = {}  # the policy asks for the same few steps every step
        # seqs -> tokens -> [factor over raw * correction, observations]; and, per batch size until `observe`
        # measures it again, the factors asked for
        self._cells: dict[int, dict[int, list[float]]] = {}
        self._factors: dict[int, dict[int, float]] = {}
        # `fit_cells`: per batch size, its fitted learned times (token counts, seconds), and the observations since
        self._curves: dict[int, tuple[list[int], np.ndarray]] = {}
        self._fresh: dict[int, int] = {}
        for seqs in sorted({s for s, _, _ in self.points}):
            q = sorted((t / seqs, sec) for s, t, sec in self.points if s == seqs)
            # a longer query never costs less: a faster measurement of a larger step is noise, pooled with its
            # neighbours (isotonic least squares) rather than lifted to the slowest of them
            qs, ts = [a for a, _ in q], [b for _, b in q]
            self._rows.append((seqs, np.array(qs), convex(qs, ts) if self.convex else isotonic(ts)))

    def plane(self, num_seqs: float, num_tokens: float) -> float:
        return self.intercept + self.per_seq * num_seqs + self.per_token * num_tokens

    def predict(self, num_seqs: int, num_tokens: int) -> float:
        return max(self._raw(num_seqs, num_tokens), 1e-6) * self.correction * self.factor(num_seqs, num_tokens)

    def factor(self, num_seqs: int, num_tokens: int) -> float:
        """The learned factor of a step: 1 until a step of its batch size is measured. With `fit_cells`, the
        batch size's fitted learned time over the profile's, interpolated in tokens (the nearest fitted one past
        their ends); else its cell's once measured CELL_MIN times, else interpolated between the measured cells of
        its batch size."""
        factors = self._factors.setdefault(num_seqs, {})
        if num_tokens not in factors:
            cells = self._cells.get(num_seqs, {})
            if self.fit_cells and cells:
                if num_seqs not in self._curves:
                    self._curves[num_seqs] = self._fitted(num_seqs, cells)
                ts, fitted = self._curves[num_seqs]
                t = min(max(num_tokens, ts[0]), ts[-1])
                factors[num_tokens] = float(np.interp(t, ts, fitted)) / max(self._raw(num_seqs, t), 1e-6)
            else:
                known = sorted((t, f) for t, (f, n) in cells.items() if n >= CELL_MIN)
                factors[num_tokens] = float(np.interp(num_tokens, [t for t, _ in known], [f for _, f in known])) \
                    if known else 1.0
        return factors[num_tokens]

    def _fitted(self, num_seqs: int, cells: dict[int, list[float]]) -> tuple[list[int], np.ndarray]:
        """The batch size's learned times (each cell's factor times the profile's, weighted by its observations)
        and the profile's own at its token counts (PRIOR_WEIGHT each), fitted as the grid was: (token counts,
        fitted times without the correction)."""
        qs = sorted({float(q) for _, row, _ in self._rows for q in row}) or [1.0, 2.0, 3.0, 5.0, 9.0]
        prior = sorted({max(num_seqs, round(num_seqs * q)) for q in qs})
        weights = {t: min(n, 1.0 / CELL_WEIGHT) for t, (_, n) in cells.items()}
        # the prior gives the shape, not the level: at the cells' mean factor, else it pulls the cells towards it
        # and the running correction, which divides by their fit, away from it
        level = sum(cells[t][0] * w for t, w in weights.items()) / sum(weights.values())
        points = [(t, self._raw(num_seqs, t) * cells[t][0], w) for t, w in weights.items()]
        points += [(t, self._raw(num_seqs, t) * level, PRIOR_WEIGHT) for t in prior]
        sums: dict[int, list[float]] = {}  # token count -> [weighted sum, weight]: a cell and a prior point pool
        for t, value, w in points:
            acc = sums.setdefault(t, [0.0, 0.0])
            acc[0] += value * w
            acc[1] += w
        ts = sorted(sums)
        values, pooled = [sums[t][0] / sums[t][1] for t in ts], [sums[t][1] for t in ts]
        return ts, convex(ts, values, pooled) if self.convex else isotonic(values, pooled)

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
        """Fold one measured step into the correction ratio (exponential average) and, with `learn_cells`,
        into its cell's factor."""
        raw = max(self._raw(num_seqs, num_tokens), 1e-6)
        ratio = min(max(seconds / raw, 0.1), 10.0)
        if not self.learn_cells:
            self.correction += weight * (ratio - self.correction)
            return
        self.correction += weight * (ratio / self.factor(num_seqs, num_tokens) - self.correction)
        cell = self._cells.setdefault(num_seqs, {}).setdefault(num_tokens, [1.0, 0])
        cell[1] += 1
        cell[0] += max(1.0 / cell[1], CELL_WEIGHT) * (ratio / self.correction - cell[0])
        # only this batch size's factors moved; fitted, they are fitted again every REFIT_EVERY observations of
        # it (a fit takes ~0.5 ms, a cell's factor moves by at most CELL_WEIGHT of its error an observation)
        fresh = self._fresh[num_seqs] = self._fresh.get(num_seqs, 0) + 1
        if not self.fit_cells or fresh >= REFIT_EVERY or cell[1] <= CELL_MIN:
            self._factors.pop(num_seqs, None)
            self._curves.pop(num_seqs, None)
            self._fresh[num_seqs] = 0

    @classmethod
    def fit(cls, samples: list[tuple[int, int, float]], grid: bool = False, convex: bool = False) -> StepCost:
        """Least squares over (seqs, tokens, seconds); slopes are clipped at zero (time never falls).

        `grid`: keep the samples too and predict by interpolating them (the plane extrapolates); `convex`: their
        convex fit per batch size (else non-decreasing)."""
        assert samples
        a = np.array([[1.0, s, t] for s, t, _ in samples])
        y = np.array([sec for _, _, sec in samples])
        coef = np.linalg.lstsq(a, y, rcond=None)[0]
        intercept, per_seq, per_token = (float(c) for c in coef)
        per_seq, per_token = max(per_seq, 0.0), max(per_token, 0.0)
        if per_seq == 0.0 or per_token == 0.0:  # refit the intercept for the clipped slopes
            intercept = float(np.mean(y - per_seq * a[:, 1] - per_token * a[:, 2]))
        points = [(int(s), int(t), float(sec)) for s, t, sec in samples] if grid else []
        return cls(max(intercept, 0.0), per_seq, per_token, points=points, convex=convex and grid)

    def save(self, path: str | Path) -> None:
        data = {k: v for k, v in asdict(self).items() if k not in ("points", "learn_cells", "fit_cells")} | {"correction": 1.0}
        if self.points:
            data["points"] = [list(p) for p in self.points]
        Path(path).write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> StepCost:
        """A file without "points" gives the plane alone."""
        data = json.loads(Path(path).read_text())
        points = [(int(s), int(t), float(sec)) for s, t, sec in data.get("points", [])]
        return cls(float(data["intercept"]), float(data["per_seq"]), float(data["per_token"]), points=points,
                   convex=bool(data.get("convex", False)))
