"""The JSON-Schema-Test-Suite figures (mask alone, through `recipe constrain check`'s path) never fall.

`tests/constraints/suite_figures.json` is written by `bench/constraints.py --write-figures`; per keyword file,
completeness (valid accepted) and tightness (invalid rejected) may only rise, and no step may be unsound.
"""

from __future__ import annotations

import json
from pathlib import Path

from recipe.constraints.suite import run_suite, total

FIGURES = Path(__file__).with_name("suite_figures.json")


def test_suite_figures_never_fall(tok, suite_dir, remotes) -> None:
    recorded = json.loads(FIGURES.read_text())
    tallies = run_suite(suite_dir, tok, remotes=remotes)
    assert set(tallies) == set(recorded["files"])
    for name, t in tallies.items():
        want = recorded["files"][name]
        got = t.figures()
        assert got["unsound"] == 0, name
        assert got["valid_accepted"] >= want["valid_accepted"], (name, "completeness fell", got, want)
        assert got["invalid_rejected"] >= want["invalid_rejected"], (name, "tightness fell", got, want)
    tot = total(tallies).figures()
    assert tot["overall"] >= recorded["total"]["overall"]
    # and it beats every backend used directly (measured in the same bench run that wrote the file)
    assert all(tot["overall"] > a["overall"] for a in recorded["anchors"].values())
