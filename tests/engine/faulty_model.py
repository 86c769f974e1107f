"""The tiny paged model with faults on demand: a forward that raises, or one that waits at a gate."""

from __future__ import annotations

import threading

import torch
from tiny_paged_model import TinyPagedLM


class ModelFailure(RuntimeError):
    """Raised by `FaultyModel.forward` once armed: stands for a device error in the middle of a step."""


class FaultyModel(TinyPagedLM):
    """`fail_after`: forward calls that succeed before every later one raises (None = never).
    `gate`: while cleared, forward waits for it (so a test can act while a step is in flight)."""

    def __init__(self, seed: int = 0, fail_after: int | None = None) -> None:
        super().__init__(seed=seed)
        self.fail_after = fail_after
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # set each time a forward call starts

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.entered.set()
        if not self.gate.wait(timeout=30):
            raise TimeoutError("the test never opened the gate")
        if self.fail_after is not None and self.forward_calls >= self.fail_after:
            raise ModelFailure("injected failure in the middle of a step")
        return super().forward(input_ids, positions)
