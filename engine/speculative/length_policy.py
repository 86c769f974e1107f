"""How many draft tokens each sequence verifies this step (DSpark's greedy budget search, Algorithm 1).

Confidences multiply into survival probabilities s[i][j] = P(drafts 0..j of sequence i all accepted).
A step that verifies a set S of (sequence, position) pairs emits, in expectation, one token per sequence
plus the sum of their survivals; it costs `step_time(tokens)`. Pairs are admitted in decreasing survival
(a sequence's survivals never increase along its draft, so every sequence gets a prefix), and the size
that maximises expected tokens per second wins. A sequence may get 0.
"""

from __future__ import annotations

from collections.abc import Callable


def survivals(confidences: list[float]) -> list[float]:
    out, s = [], 1.0
    for c in confidences:
        s *= min(max(c, 0.0), 1.0)
        out.append(s)
    return out


def choose_lengths(confidences: list[list[float]], step_time: Callable[[int], float], base_tokens: int,
                   max_extra_tokens: int | None = None, spent: float = 0.0) -> list[int]:
    """Draft length per sequence maximising (len(confidences) + sum of chosen survivals) / (spent + step_time(tokens)).

    `base_tokens`: tokens the step computes anyway (one per decoding sequence, plus any prefill);
    `max_extra_tokens`: cap on the draft tokens (the step's remaining token budget); `spent`: seconds the step
    takes whatever is verified (the drafting already done): the rate is of the whole step, so a draft token
    costs its marginal verification against a larger time, and a longer draft pays sooner.
    """
    entries = [(s, j, i) for i, conf in enumerate(confidences) for j, s in enumerate(survivals(conf))]
    entries.sort(key=lambda e: (-e[0], e[1], e[2]))
    if max_extra_tokens is not None:
        entries = entries[:max(max_extra_tokens, 0)]
    expected = float(len(confidences))
    best_rate, best_n = expected / (spent + step_time(base_tokens)), 0
    for n, (s, _, _) in enumerate(entries, 1):
        expected += s
        rate = expected / (spent + step_time(base_tokens + n))
        if rate > best_rate:
            best_rate, best_n = rate, n
    lengths = [0] * len(confidences)
    for _, _, i in entries[:best_n]:
        lengths[i] += 1
    return lengths
