"""A picklable test constraint and a runner that collects a router's streamed outputs per choice."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np

EOS = 2


class EvenMatcher:
    """Allows only even token ids (EOS excepted) for `length` tokens, then only EOS; terminated after EOS."""

    def __init__(self, length: int, vocab_size: int) -> None:
        self.length, self.vocab_size = length, vocab_size
        self.accepted: list[int] = []

    def _allowed(self) -> list[int]:
        if len(self.accepted) >= self.length:
            return [EOS]
        return [t for t in range(4, self.vocab_size, 2)]

    def fill_bitmask(self, out: np.ndarray) -> None:
        out[:] = 0
        for t in self._allowed():
            out[t // 32] |= np.int32(np.uint32(1 << (t % 32)).view(np.int32))

    def accept(self, token_id: int) -> bool:
        if token_id not in self._allowed():
            return False
        self.accepted.append(token_id)
        return True

    def is_terminated(self) -> bool:
        return bool(self.accepted) and self.accepted[-1] == EOS


class EvenTokens:
    def __init__(self, length: int, vocab_size: int = 256) -> None:
        self.length, self.vocab_size = length, vocab_size

    def matcher(self) -> EvenMatcher:
        return EvenMatcher(self.length, self.vocab_size)


async def collect(engine: Any, request_id: str, prompt: list[int], params: Any) -> dict[int, tuple[list[int], str | None]]:
    """{choice: (tokens, finish_reason)} from one streamed request."""
    toks: dict[int, list[int]] = {}
    reasons: dict[int, str | None] = {}
    async for out in engine.generate(request_id, prompt, params):
        toks.setdefault(out.index, []).extend(out.new_token_ids)
        if out.finished:
            reasons[out.index] = out.finish_reason
    return {i: (toks.get(i, []), reasons.get(i)) for i in range(params.n)}


def run_all(engine: Any, prompts: list[list[int]], params: list[Any], prefix: str = "r") -> list[dict[int, Any]]:
    async def main() -> list[dict[int, Any]]:
        return await asyncio.gather(*(collect(engine, f"{prefix}{i}", p, sp)
                                      for i, (p, sp) in enumerate(zip(prompts, params, strict=True))))

    return asyncio.run(main())


def reference(llm: Any, prompts: list[list[int]], params: list[Any]) -> list[dict[int, Any]]:
    """The same shape from a colocated `LLM.generate`."""
    outs = llm.generate(prompts, params)
    by_req: dict[str, dict[int, Any]] = {}
    for o in outs:
        by_req.setdefault(o.request_id, {})[o.index] = (list(o.new_token_ids), o.finish_reason)
    return list(by_req.values())


def prompts_of(seed: int, count: int, lo: int = 1, hi: int = 40) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 256) for _ in range(rng.randrange(lo, hi))] for _ in range(count)]
