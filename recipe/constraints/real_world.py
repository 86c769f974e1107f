"""Real-world schemas with their published examples (tests/data/real_world_schemas): the figures.

Per schema: compile with `strict=False` and the documents it `$ref`s as `resources`. Per example: re-order
its keys to schema order (`schema_order.in_schema_order`: the order the mask generates), serialise it
compactly, and walk it token by token through the mask (`instance_check.walk_ids`).
* valid example accepted ⇔ every token allowed and EOS allowed at the end;
* invalid example rejected ⇔ the mask refuses it, or the post-generation check (`CompiledConstraint.validate`,
  `jsonschema`) does; both counts are kept;
* unsound steps: the mask allowed an id the matcher then refused (must stay 0).
A schema that does not compile (within `timeout_s`, 60 s: coverage, not speed, is measured here; the
corpus runs on shared machines) counts all its examples as wrong.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipe.constraints.compiler import compile_constraint
from recipe.constraints.instance_check import check_text, serialise
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.schema_order import in_schema_order
from recipe.tokenizer import Tokenizer


@dataclass
class Tally:
    schemas: int = 0
    compiled: int = 0
    exact: int = 0  # compiled schemas the mask enforces exactly
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_rejected: int = 0  # by the mask or the post-generation check
    invalid_rejected_by_mask: int = 0
    unsound: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, o: Tally) -> None:
        for k, v in asdict(o).items():
            if k == "failures":
                self.failures.extend(o.failures)
            else:
                setattr(self, k, getattr(self, k) + v)

    def figures(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: v for k, v in asdict(self).items() if k != "failures"}
        d["compiled_rate"] = round(self.compiled / self.schemas, 4) if self.schemas else 1.0
        d["accepted_rate"] = round(self.valid_accepted / self.valid, 4) if self.valid else 1.0
        d["rejected_rate"] = round(self.invalid_rejected / self.invalid, 4) if self.invalid else 1.0
        d["rejected_by_mask_rate"] = round(self.invalid_rejected_by_mask / self.invalid, 4) if self.invalid else 1.0
        return d


# the default test suite's fast slice: the schemas where each cause named in issue 12 was seen (look-around,
# resources, recursion beside siblings, fragment base URIs, `.*` beside other patterns, "schema too large"),
# and every 25th schema of the corpus
CAUSES = frozenset({"browser.i18n", "emmet", "bukkit-plugin", "resjson", "catalog-info", "ocelot", "chrome-manifest",
                    "minecraft-advancement", "dependabot-2.0", "prometheus", "settings.job",
                    "azure-deviceupdate-update-manifest-4"})


def in_fast_slice(index: int, name: str) -> bool:
    return name in CAUSES or index % 25 == 0


def load_corpus(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def run_schema(rec: dict[str, Any], tokenizer: Tokenizer, timeout_s: float = 60.0) -> Tally:
    t = Tally(schemas=1, valid=len(rec["valid"]), invalid=len(rec["invalid"]))
    name = rec["name"]
    resources = rec.get("resources") or None
    try:
        c = compile_constraint("json_schema", rec["schema"], tokenizer, strict=False, timeout_s=timeout_s,
                               cache=None, resources=resources)
    except ConstraintError as exc:
        t.failures.append(f"{name}: not compiled: {exc.message[:300]}")
        return t
    t.compiled = 1
    t.exact = int(c.report is not None and c.report.enforced_exactly)
    for ex in rec["valid"]:
        text = serialise(in_schema_order(ex["data"], rec["schema"], resources))
        w = check_text(c, text, tokenizer)
        t.unsound += w.unsound_steps
        if w.accepted:
            t.valid_accepted += 1
        else:
            t.failures.append(f"{name}/{ex['file']}: valid refused at token {w.masked_at}: "
                              f"{_around(text, tokenizer, w.masked_at)}")
    for ex in rec["invalid"]:
        text = serialise(in_schema_order(ex["data"], rec["schema"], resources))
        w = check_text(c, text, tokenizer)
        t.unsound += w.unsound_steps
        if not w.accepted:
            t.invalid_rejected_by_mask += 1
        if not w.accepted or c.validate(text):
            t.invalid_rejected += 1
        else:
            t.failures.append(f"{name}/{ex['file']}: invalid accepted")
    return t


def _around(text: str, tokenizer: Tokenizer, at: int | None) -> str:
    if at is None:
        return "(EOS refused)"
    ids = tokenizer.encode_plain(text)
    head = tokenizer.decode(ids[:at])
    return f"...{head[-60:]!r} ⟶ {tokenizer.decode(ids[at:at + 3])!r}"


def run_corpus(path: Path, tokenizer: Tokenizer, names: set[str] | None = None) -> tuple[Tally, dict[str, Tally]]:
    total = Tally()
    per: dict[str, Tally] = {}
    for rec in load_corpus(path):
        if names is not None and rec["name"] not in names:
            continue
        t = run_schema(rec, tokenizer)
        per[rec["name"]] = t
        total.add(t)
    return total, per
