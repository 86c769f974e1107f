"""The rate at which drafts' first tokens hit: a running mean over the last `window` outcomes or so.

"auto" pauses drafting while this rate is below the first token's break-even survival. Each outcome moves the
rate by 1/window once warm (an exponential average), and by 1/(outcomes + 2) before (the mean of the outcomes
so far and one prior hit and miss), so a hopeless drafter is paused after a few misses whatever the window.
A short window chases noise: at a true rate of 0.16 a window of 5 (the old 0.2 weight) has a spread of about
0.12, so a break-even of 0.1 pauses a drafter that pays for itself, for many steps at a time (a paused drafter is
measured on probe steps only); 24 spreads 0.05.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HitRate:
    window: int = 24
    rate: float = 0.5
    outcomes: int = 0

    def add(self, hit: bool) -> None:
        self.outcomes += 1
        weight = max(1.0 / self.window, 1.0 / (self.outcomes + 2))
        self.rate += weight * (float(hit) - self.rate)
