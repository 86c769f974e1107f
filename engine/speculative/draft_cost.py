"""The drafter's own time: seconds per drafted position, a running average per batch size (rows drafted).

Measured online from each `propose` call (its time over the positions it chained): a chained position is one
pass of the drafter over all its rows, so its cost depends on the rows, not on how many of them take it. A batch
size not measured yet borrows the nearest measured one's figure; none measured: 0 (drafting looks free until
the first proposal is timed).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DraftCost:
    weight: float = 0.2  # exponential average: each measurement moves the figure by this share
    overall: float = 0.0  # seconds per position over every batch size (the earlier, unkeyed figure)
    by_rows: dict[int, float] = field(default_factory=dict)

    def observe(self, rows: int, positions: int, seconds: float) -> None:
        """A `propose` over `rows` sequences that chained `positions` positions in `seconds`."""
        if positions <= 0 or rows <= 0:
            return
        per_position = seconds / positions
        self.overall += self.weight * (per_position - self.overall)
        old = self.by_rows.get(rows)
        self.by_rows[rows] = per_position if old is None else old + self.weight * (per_position - old)

    def per_position(self, rows: int) -> float:
        """Seconds per chained position at `rows` rows (the nearest measured batch size's figure)."""
        if not self.by_rows:
            return 0.0
        if rows in self.by_rows:
            return self.by_rows[rows]
        nearest = min(self.by_rows, key=lambda r: (abs(r - rows), r))
        return self.by_rows[nearest]
