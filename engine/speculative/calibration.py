"""Per-position acceptance rates, counted on earlier verifications: the drafters' calibrated confidences.

A confidence for position j of a bucket is P(accept j | accepted 1..j-1), estimated as
(accepted + prior * a) / (tried + prior) over the proposals verified so far: every figure used for a new
draft comes from drafts already verified (held out from the one being scored). `AcceptanceTable` buckets by
a drafter's own key (the n-gram's matched length); `BinCalibration` by the drafter's probability of its token
(the learned head, the MTP layer), starting from counts measured offline where there are any.
"""

from __future__ import annotations

from collections import defaultdict

from recipe.engine.speculative.drafter import Draft


class AcceptanceTable:
    def __init__(self, max_len: int, prior_rate: float = 0.5, prior_weight: float = 2.0) -> None:
        self.max_len = max_len
        self.prior_rate = prior_rate
        self.prior_weight = prior_weight
        self.tried: dict[int, list[int]] = defaultdict(lambda: [0] * max_len)
        self.accepted: dict[int, list[int]] = defaultdict(lambda: [0] * max_len)

    def confidences(self, key: int, n: int) -> list[float]:
        tried, acc = self.tried[key], self.accepted[key]
        w, r = self.prior_weight, self.prior_rate
        return [(acc[j] + w * r) / (tried[j] + w) for j in range(min(n, self.max_len))]

    def record(self, key: int, proposed: int, num_accepted: int) -> None:
        """A verified proposal of `proposed` tokens whose first `num_accepted` were accepted."""
        tried, acc = self.tried[key], self.accepted[key]
        for j in range(min(proposed, num_accepted + 1, self.max_len)):
            tried[j] += 1
            if j < num_accepted:
                acc[j] += 1


BINS = 10


class BinCalibration:
    """P(accept | head probability bin, position), counted; the prior is the bin's centre, weight 2.

    `counts`: verdicts counted offline (held-out text), the starting point. `offline_weight`: a bin's offline
    counts weigh at most as much as this many verdicts of this run (same rate, fewer counts), so the run's own
    verdicts take over within a few dozen drafts where its text differs from the held-out text; None: as counted.
    """

    def __init__(self, max_len: int, counts: dict[str, list[int]] | None = None,
                 offline_weight: float | None = None) -> None:
        self.max_len = max_len
        self.tried: list[list[float]] = [[0] * BINS for _ in range(max_len)]
        self.accepted: list[list[float]] = [[0] * BINS for _ in range(max_len)]
        for key, (t, a) in (counts or {}).items():
            j, b = (int(x) for x in key.split(","))
            if j < max_len:
                scale = 1.0 if offline_weight is None or t <= offline_weight else offline_weight / t
                self.tried[j][b], self.accepted[j][b] = t * scale, a * scale

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

    def expected(self, j: int) -> float:
        """The acceptance rate at position `j` over every bin (a confidence before its probability is known)."""
        j = min(j, self.max_len - 1)
        return (sum(self.accepted[j]) + 1) / (sum(self.tried[j]) + 2)

    def survive(self, survival: list[float], j: int, probs: list[float]) -> list[float]:
        """Each row's survival after its position-`j` draft of probability `probs[row]`."""
        return [s * self.confidence(j, p) for s, p in zip(survival, probs, strict=True)]

    def draft(self, ids: list[int], raw: list[float]) -> Draft:
        """A proposal of `ids` whose own probabilities are `raw`, with their calibrated confidences."""
        return Draft(ids, [self.confidence(j, p) for j, p in enumerate(raw)], raw=raw)

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """Verification's verdict on `draft`: its first `num_accepted` tokens accepted, the next one (if
        verified) rejected."""
        for j in range(min(len(draft.raw), num_accepted + 1)):
            self.record(j, draft.raw[j], j < num_accepted)

    def counts(self) -> dict[str, list[float]]:
        return {f"{j},{b}": [self.tried[j][b], self.accepted[j][b]]
                for j in range(self.max_len) for b in range(BINS) if self.tried[j][b]}
