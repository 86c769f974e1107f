"""Freshly generated request bodies (seeds other than the golden set's) convert, render and encode
exactly as the official reference does: a live differential test beyond the committed vectors.

The generator (`golden/make_vectors.py`) draws call ids at random in every style clients send (and
spellings of markers), puts tool results and Responses outputs in random orders, and has texts beside
images spell the image placeholder. Compared: conversion, prompt, special ranges, image sources, V4
token ids, or the error (see the `reference_diff` fixture).

The default run checks 40 bodies per API; `-m slow` checks 1,000 per API.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest


def check(api: str, count: int, seed: str, make_vectors: Any, reference_diff: Any) -> None:
    rng = random.Random(seed)
    failures = []
    for i in range(count):
        text = json.dumps(make_vectors.GENERATORS[api](rng), ensure_ascii=False)
        d = reference_diff(api, text)
        if d is not None:
            failures.append(f"#{i}: {d}\n    {text[:400]}")
    assert not failures, f"{len(failures)}/{count} differ (seed {seed}):\n" + "\n".join(failures[:10])


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_generated_bodies_match_the_reference(api: str, make_vectors: Any, reference_diff: Any) -> None:
    check(api, 40, f"recipe-differential-{api}", make_vectors, reference_diff)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_many_generated_bodies_match_the_reference(api: str, make_vectors: Any, reference_diff: Any) -> None:
    check(api, 1000, f"recipe-differential-slow-{api}", make_vectors, reference_diff)
