"""Per-request sampling parameters (the engine's only knobs a request can turn)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token, and when to stop.

    `temperature=0` is greedy. `logprobs`: None = none; k >= 0 = the chosen token's logprob plus the top k
    alternatives (logprobs are of the model's distribution, before penalties, temperature and masks).
    `constraint`: a compiled constraint (`.matcher()`); the engine makes one matcher per sequence, masks
    the logits with it before sampling, and finishes a sequence with reason "stop" once it terminates, or
    with reason "dead_end" (no token emitted) when it allows no token or refuses the sampled one: a
    constrained sequence never leaves its constraint and never falls back to free generation.
    `ignore_eos`: the model's end-of-sequence ids do not stop the sequence (`stop_token_ids` still do).
    `kv_retention`: the retention class (engine config `kv_retention`) under which the lower KV tiers keep
    this request's blocks.
    `session_key`: the conversation this request continues (the API's `prompt_cache_key`). With the sliding-
    window session cache on, a session's window state is also held under this key: a newer state supersedes
    the session's older ones (they are evicted first), and the disaggregated router keeps the session on one
    worker. Outputs never depend on it: a state is used only where the prompt's chained hash matches.
    The token that stops a sequence (EOS, or one of `stop_token_ids`) is not part of its output.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: int | None = None
    n: int = 1
    constraint: Any = None
    kv_retention: str | None = None  # retention class of the KV this request stores (None = "chat")
    session_key: str | None = None  # the conversation this request continues (API: prompt_cache_key)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        checks = [
            (self.temperature >= 0.0, f"temperature must be >= 0, got {self.temperature}"),
            (0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1], got {self.top_p}"),
            (self.top_k == -1 or self.top_k >= 1, f"top_k must be -1 (off) or >= 1, got {self.top_k}"),
            (0.0 <= self.min_p <= 1.0, f"min_p must be in [0, 1], got {self.min_p}"),
            (-2.0 <= self.presence_penalty <= 2.0, f"presence_penalty must be in [-2, 2], got {self.presence_penalty}"),
            (-2.0 <= self.frequency_penalty <= 2.0,
             f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}"),
            (self.repetition_penalty > 0.0, f"repetition_penalty must be > 0, got {self.repetition_penalty}"),
            (self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}"),
            (self.logprobs is None or 0 <= self.logprobs <= 20, f"logprobs must be in [0, 20], got {self.logprobs}"),
            (self.n >= 1, f"n must be >= 1, got {self.n}"),
            (self.session_key is None or (isinstance(self.session_key, str) and 0 < len(self.session_key) <= 256),
             "session_key must be a string of 1 to 256 characters"),
            (self.constraint is None or hasattr(self.constraint, "matcher"),
             "constraint must be a compiled constraint with .matcher()"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1
