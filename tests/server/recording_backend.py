"""An echo backend that records one `GenerationParams` field of every request it is given."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from recipe.server.backend import EchoBackend, GenerationDelta, GenerationParams, echo_model_card


class RecordingEcho(EchoBackend):
    def __init__(self, model: str, field: str) -> None:
        super().__init__(model=echo_model_card(model))
        self.field = field
        self.seen: list[Any] = []

    async def generate(self, request_id: str, prompt_ids: Sequence[int],
                       params: GenerationParams) -> AsyncIterator[GenerationDelta]:
        self.seen.append(getattr(params, self.field))
        async for d in super().generate(request_id, prompt_ids, params):
            yield d
