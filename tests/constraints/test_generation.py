"""Generation with a random-weight model under the mask always yields schema-valid JSON (hundreds of seeds).

The model is a seeded random bigram network over all 129,280 ids;
sampling goes through the packed bitmask exactly as an engine would (`bitmask.apply_to_logits`).
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from recipe.constraints import bitmask as bm
from recipe.constraints import compile_constraint

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer",
     "minimum": 0, "maximum": 120}, "ok": {"type": "boolean"}}, "required": ["name", "age", "ok"],
     "additionalProperties": False},
    {"type": "array", "items": {"enum": ["red", "green", 3, None]}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {"point": {"$ref": "#/$defs/p"}, "tag": {"const": "v1"}},
     "required": ["point", "tag"], "additionalProperties": False,
     "$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
                                                      "y": {"type": "integer", "minimum": -9, "maximum": 9}},
                     "required": ["x", "y"], "additionalProperties": False}}},
    {"anyOf": [{"type": "string", "pattern": "^[a-z]{2,5}$"}, {"type": "integer", "minimum": 10, "maximum": 99}]},
    {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}}, "required": ["kind"],
     "additionalProperties": False, "dependentRequired": {"kind": ["kind"]}},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"],
     "additionalProperties": False},
]
SEEDS_PER_SCHEMA = 20  # 120 seeded generations in the default run; the slow run does 600


class RandomBigramModel:
    """Random weights: the previous id picks one of `states` hidden states (a hashed embedding); each state
    has its own random logit row over the whole vocabulary (precomputed, so a step costs a copy)."""

    def __init__(self, vocab_size: int, seed: int, states: int = 32) -> None:
        rng = np.random.default_rng(seed)
        self.state_of = rng.integers(0, states, size=vocab_size)
        self.rows = rng.standard_normal((states, vocab_size), dtype=np.float32) * 2.0

    def logits(self, prev: int) -> np.ndarray:
        return self.rows[self.state_of[prev]].copy()


def generate(c, model: RandomBigramModel, rng: np.random.Generator, max_tokens: int = 200) -> tuple[str, bool]:
    m = c.matcher()
    mask = c.allocate_bitmask()
    prev = 0
    ids: list[int] = []
    for _ in range(max_tokens):
        m.fill_bitmask(mask)
        logits = bm.apply_to_logits(model.logits(prev), mask)
        # exponential race = a sample of softmax(logits); masked ids (-inf) never win
        noise = -np.log(rng.standard_exponential(logits.size, dtype=np.float32) + np.float32(1e-30))
        t = int(np.argmax(logits + noise))
        assert m.accept(t)
        if t in c.eos_token_ids:
            return m.text, True
        ids.append(t)
        prev = t
    return m.text, False


def run_seeds(tok, seeds_per_schema: int) -> int:
    model = RandomBigramModel(tok.vocab_size, seed=7)
    finished = 0
    for n, schema in enumerate(SCHEMAS):
        c = compile_constraint("json_schema", schema, tok, strict=True)
        assert c.report is not None and c.report.enforced_exactly
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
        for seed in range(seeds_per_schema):
            text, done = generate(c, model, np.random.default_rng(1000 * n + seed))
            if done:
                finished += 1
                errors = [e.message for e in validator.iter_errors(json.loads(text))]
                assert not errors, (schema, text, errors)
    return finished


def test_random_model_under_the_mask_always_produces_valid_json(tok) -> None:
    finished = run_seeds(tok, SEEDS_PER_SCHEMA)
    assert finished >= 0.9 * len(SCHEMAS) * SEEDS_PER_SCHEMA


@pytest.mark.slow
def test_random_model_many_seeds(tok) -> None:
    assert run_seeds(tok, 100) >= 0.9 * len(SCHEMAS) * 100
