"""A prefill engine and a decode engine in one process, joined by `HandoffConnector`s over a `MemoryTransport`,
driven as the router drives two workers: reserve on the decode side, prefill with its `skip_blocks`, install
each hand-off, release what ended at prefill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recipe.engine.kv_connector.handoff_connector import HandoffConnector
from recipe.engine.kv_connector.memory_transport import MemoryTransport
from recipe.engine.llm_engine import LLMEngine
from recipe.engine.outputs import RequestOutput


@dataclass
class HandoffPair:
    prefill: LLMEngine
    decode: LLMEngine
    transport: MemoryTransport

    @classmethod
    def of(cls, model: str, **config: Any) -> HandoffPair:
        transport = MemoryTransport()
        prefill = LLMEngine(model, connector=HandoffConnector(transport), **config)
        decode = LLMEngine(model, connector=HandoffConnector(), **config)
        return cls(prefill, decode, transport)

    @property
    def pc(self) -> HandoffConnector:
        assert isinstance(self.prefill.connector, HandoffConnector)
        return self.prefill.connector

    @property
    def dc(self) -> HandoffConnector:
        assert isinstance(self.decode.connector, HandoffConnector)
        return self.decode.connector

    def generate(self, prompts: list[list[int]], params: list[Any], prefix: str = "r"
                 ) -> tuple[list[dict[int, tuple[list[int], str | None]]], list[int]]:
        """{choice: (tokens, finish_reason)} per request, and the blocks the decode side held per request."""
        tokens: dict[tuple[str, int], list[int]] = {}
        reasons: dict[tuple[str, int], str | None] = {}

        def record(outs: list[RequestOutput]) -> None:
            for o in outs:
                tokens.setdefault((o.request_id, o.index), []).extend(o.new_token_ids)
                if o.finished:
                    reasons[(o.request_id, o.index)] = o.finish_reason

        held = []
        for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
            skip = self.dc.reserve(f"{prefix}{i}", p, sp)
            assert skip is not None, "the decode pool is sized for every test request at once"
            held.append(skip)
            self.pc.add_prefill(f"{prefix}{i}", p, sp, skip)
        installed: set[str] = set()
        while self.prefill.has_unfinished_requests() or self.decode.has_unfinished_requests():
            if self.prefill.has_unfinished_requests():
                record(self.pc.rewrite(self.prefill.step()))
                for h in self.pc.build_connector_meta():
                    self.dc.install(h, self.transport.take(h.payload))
                    installed.add(h.request_id)
            if self.decode.has_unfinished_requests():
                record(self.decode.step())
        for i in range(len(prompts)):
            if f"{prefix}{i}" not in installed:  # every choice ended at its first token
                assert self.dc.release(f"{prefix}{i}")
        assert not self.dc.reserved and len(self.transport) == 0
        out = [{c: (tokens.get((f"{prefix}{i}", c), []), reasons.get((f"{prefix}{i}", c))) for c in range(sp.n)}
               for i, sp in enumerate(params)]
        return out, held

    def shutdown(self) -> None:
        self.prefill.shutdown()
        self.decode.shutdown()
