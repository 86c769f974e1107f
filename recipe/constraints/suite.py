"""Run the JSON-Schema-Test-Suite through the `recipe constrain check` path and tally per keyword file.

Per group: compile the schema (non-strict: the mask enforces what it can); per test: walk the instance
(`instance_check.check_value`). Valid → correct iff accepted; invalid → correct iff rejected. A group that
does not compile counts all its tests as wrong (as in structured-output.md §6). `unsound` counts steps where
the mask allowed an id the matcher refused (must be 0).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipe.constraints.compiler import compile_constraint
from recipe.constraints.instance_check import check_value
from recipe.constraints.kinds import ConstraintError
from recipe.tokenizer import Tokenizer


@dataclass
class FileTally:
    groups: int = 0
    compiled: int = 0
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_in_compiled: int = 0
    invalid_rejected: int = 0
    exact_groups: int = 0
    unsound: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def tests(self) -> int:
        return self.valid + self.invalid

    @property
    def correct(self) -> int:
        return self.valid_accepted + self.invalid_rejected

    def add(self, o: FileTally) -> None:
        for k in ("groups", "compiled", "valid", "valid_accepted", "invalid", "invalid_in_compiled",
                  "invalid_rejected", "exact_groups", "unsound"):
            setattr(self, k, getattr(self, k) + getattr(o, k))

    def figures(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "errors"}
        d["tests"] = self.tests
        d["correct"] = self.correct
        d["completeness"] = round(self.valid_accepted / self.valid, 4) if self.valid else 1.0
        d["tightness"] = round(self.invalid_rejected / self.invalid, 4) if self.invalid else 1.0
        d["overall"] = round(self.correct / self.tests, 4) if self.tests else 1.0
        return d


def load_suite(folder: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}


def load_remotes(folder: Path) -> dict[str, Any]:
    """The suite's remote documents, keyed by the URI the tests use (http://localhost:1234/…)."""
    out: dict[str, Any] = {}
    for p in sorted(folder.rglob("*.json")):
        out["http://localhost:1234/" + p.relative_to(folder).as_posix()] = json.loads(p.read_text(encoding="utf-8"))
    return out


def embed_remotes(schema: Any, remotes: dict[str, Any]) -> Any:
    """`schema` as a compound document carrying the remote documents it may `$ref` (each under `$defs` with
    its URI as `$id`, as JSON Schema 2020-12 bundling does): the same documents Recipe gets as `resources`,
    in the one form a backend used directly can take. A document is carried when its file name occurs in the
    schema or in a carried document; a schema naming none is returned unchanged."""
    if not isinstance(schema, dict) or not remotes:
        return schema
    carried: dict[str, Any] = {}
    texts = [json.dumps(schema)]
    while texts:
        text = texts.pop()
        for uri, doc in remotes.items():
            if uri not in carried and uri.rsplit("/", 1)[-1] in text:
                carried[uri] = doc
                texts.append(json.dumps(doc))
    if not carried:
        return schema
    defs = dict(schema.get("$defs") or {})
    for n, (uri, doc) in enumerate(sorted(carried.items())):
        defs[f"remote_{n}"] = {**doc, "$id": uri} if isinstance(doc, dict) else doc
    return {**schema, "$defs": defs}


def run_group(group: dict[str, Any], tokenizer: Tokenizer, backend: str | None, timeout_s: float,
              remotes: dict[str, Any] | None = None) -> FileTally:
    t = FileTally(groups=1)
    tests = group["tests"]
    t.valid = sum(1 for x in tests if x["valid"])
    t.invalid = len(tests) - t.valid
    try:
        c = compile_constraint("json_schema", group["schema"], tokenizer, backend=backend, strict=False,
                               timeout_s=timeout_s, cache=None, resources=remotes, allow_unsatisfiable=True)
    except ConstraintError as exc:
        t.errors.append(f"{group['description']}: {exc.message[:200]}")
        return t
    t.compiled = 1
    t.invalid_in_compiled = t.invalid
    if c.report is not None and c.report.enforced_exactly:
        t.exact_groups = 1
    for x in tests:
        w = check_value(c, x["data"], tokenizer)
        t.unsound += w.unsound_steps
        if x["valid"] and w.accepted:
            t.valid_accepted += 1
        elif not x["valid"] and not w.accepted:
            t.invalid_rejected += 1
    return t


def run_suite(folder: Path, tokenizer: Tokenizer, backend: str | None = None, timeout_s: float = 10.0,
              files: list[str] | None = None, remotes: dict[str, Any] | None = None) -> dict[str, FileTally]:
    out: dict[str, FileTally] = {}
    for name, groups in load_suite(folder).items():
        if files is not None and name not in files:
            continue
        ft = FileTally()
        for g in groups:
            gt = run_group(g, tokenizer, backend, timeout_s, remotes)
            ft.add(gt)
            ft.errors.extend(gt.errors)
        out[name] = ft
    return out


def total(tallies: dict[str, FileTally]) -> FileTally:
    t = FileTally()
    for ft in tallies.values():
        t.add(ft)
    return t
