"""Output constraints across the process boundary.

A compiled grammar (llguidance, xgrammar) does not pickle, so the router sends the recipe that compiled
it (`ConstraintRecipe`: kind, spec, backend, stop ids, `$ref` resources) and each worker compiles it again
over its own copy of the model's tokenizer (cached per worker). The server compiles leniently (`strict`
False, as `recipe.constraints.from_output_constraint` does), and so does the worker. Any other constraint
object (tests' plain-Python constraints) crosses as it is, pickled.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from recipe.engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class ConstraintRecipe:
    kind: str
    spec: Any
    backend: str
    eos_token_ids: tuple[int, ...]
    resources: Any = None
    budget: int | None = None  # `CompiledConstraint.within_budget`: close the output within this many tokens

    def matcher(self) -> Any:
        raise RuntimeError("a ConstraintRecipe must be compiled by the worker before use")

    def key(self) -> str:
        return json.dumps([self.kind, self.spec, self.backend, self.eos_token_ids, self.resources], sort_keys=True,
                          default=str)


def to_wire(params: SamplingParams) -> SamplingParams:
    """Params whose constraint can cross to a worker process."""
    c = params.constraint
    if c is None or type(c).__name__ != "CompiledConstraint":
        return params
    extra = c.extra or {}
    recipe = ConstraintRecipe(c.kind, c.spec, c.backend, tuple(c.eos_token_ids), extra.get("resources"),
                              extra.get("budget"))
    return dataclasses.replace(params, constraint=recipe)


class ConstraintCache:
    """A worker's compiled constraints, by recipe (bounded)."""

    def __init__(self, tokenizer_json: str, capacity: int = 64) -> None:
        self.tokenizer_json = tokenizer_json
        self._tokenizer: Any = None
        self._compiled: OrderedDict[str, Any] = OrderedDict()
        self.capacity = capacity

    def resolve(self, params: SamplingParams) -> SamplingParams:
        c = params.constraint
        if not isinstance(c, ConstraintRecipe):
            return params
        key = c.key()
        compiled = self._compiled.get(key)
        if compiled is None:
            from recipe.constraints import compile_constraint
            from recipe.tokenizer import Tokenizer

            if self._tokenizer is None:
                self._tokenizer = Tokenizer(self.tokenizer_json)
            compiled = compile_constraint(c.kind, c.spec, self._tokenizer, backend=c.backend, strict=False,
                                          eos_token_ids=c.eos_token_ids, resources=c.resources)
            self._compiled[key] = compiled
            while len(self._compiled) > self.capacity:
                self._compiled.popitem(last=False)
        self._compiled.move_to_end(key)
        if c.budget is not None:
            compiled = compiled.within_budget(c.budget)
        return dataclasses.replace(params, constraint=compiled)
