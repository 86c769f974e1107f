"""Per-position acceptance rates, counted on earlier verifications: the drafters' calibrated confidences.

A confidence for position j of a bucket is P(accept j | accepted 1..j-1), estimated as
(accepted + prior * a) / (tried + prior) over the proposals verified so far: every figure used for a new
draft comes from drafts already verified (held out from the one being scored).
"""

from __future__ import annotations

from collections import defaultdict


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
