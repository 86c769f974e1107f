"""Rebuild `tests/data/real_world_schemas/corpus.jsonl.gz` from a SchemaStore checkout.

SchemaStore (https://github.com/SchemaStore/schemastore, Apache-2.0) is the catalogue editors use for
configuration files: third-party schemas in `src/schemas/json/<name>.json`, published valid examples in
`src/test/<name>/` and invalid ones in `src/negative_test/<name>/` (JSON, YAML or TOML).

Selection, deterministic for a given checkout:
* every schema that has a test folder and is not in `schema-validation.jsonc`'s `skiptest`;
* schema text at most `--max-schema-bytes` (default 64 KiB); documents it `$ref`s on json.schemastore.org
  (or relatively) are bundled as `resources` (URI → document), up to 128 KiB in all;
* examples parsed (YAML 1.2 core scalars: no timestamps, only true/false booleans; TOML without dates),
  serialised at most `--max-example-bytes` (default 8 KiB), at most 6 of each kind per schema;
* an example is kept only when `jsonschema` (the post-generation validator Recipe uses, formats asserted)
  agrees with its label, so the corpus's labels and Recipe's validator never disagree;
* a schema is kept when at least one valid example survives.

Usage: python golden/make_real_world_schemas.py SCHEMASTORE_GIT_DIR [--rev HEAD]
(SCHEMASTORE_GIT_DIR may be a bare repository: files are read with `git show REV:path`.)
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recipe.constraints.report import validate_value  # noqa: E402

OUT = ROOT / "tests" / "data" / "real_world_schemas"
STORE = "https://json.schemastore.org/"
MAX_PER_KIND = 6


class _Yaml12Loader(yaml.SafeLoader):
    """YAML with the 1.2 core schema's scalars: no timestamps, `yes`/`on` stay strings."""


_Yaml12Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag not in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:bool")]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


class Git:
    def __init__(self, git_dir: Path, rev: str) -> None:
        self.git_dir, self.rev = git_dir, rev

    def _run(self, *args: str) -> bytes:
        return subprocess.run(["git", "--git-dir", str(self.git_dir), *args], check=True,
                              capture_output=True).stdout

    def commit(self) -> str:
        return self._run("rev-parse", self.rev).decode().strip()

    def ls(self, path: str) -> list[str]:
        out = self._run("ls-tree", "-r", "--name-only", self.rev, path + "/").decode()
        return sorted(x for x in out.splitlines() if x)

    def dirs(self, path: str) -> list[str]:
        out = self._run("ls-tree", "-d", "--name-only", self.rev, path + "/").decode()
        return sorted(x.rsplit("/", 1)[-1] for x in out.splitlines() if x)

    def show(self, path: str) -> bytes:
        return self._run("show", f"{self.rev}:{path}")


def _json_like(v: Any) -> bool:
    if isinstance(v, dict):
        return all(isinstance(k, str) and _json_like(x) for k, x in v.items())
    if isinstance(v, list):
        return all(_json_like(x) for x in v)
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    return v is None or isinstance(v, bool | int | str)


def parse_example(name: str, raw: bytes) -> Any:
    """The example's JSON value, or raises ValueError when it has none (multi-document YAML, dates...)."""
    text = raw.decode("utf-8-sig")
    if name.endswith(".json"):
        value = json.loads(text)
    elif name.endswith((".yaml", ".yml")):
        docs = list(yaml.load_all(text, Loader=_Yaml12Loader))  # a SafeLoader subclass
        if len(docs) != 1:
            raise ValueError("not one YAML document")
        value = docs[0]
    elif name.endswith(".toml"):
        value = tomllib.loads(text)
    else:
        raise ValueError("unknown example format")
    if not _json_like(value):
        raise ValueError("not a JSON value")
    return value


def _refs(node: Any, base: str) -> list[str]:
    """Absolute URIs (fragment dropped) of every non-local `$ref` in a document."""
    out: list[str] = []
    stack = [(node, base)]
    while stack:
        n, b = stack.pop()
        if isinstance(n, dict):
            nid = n.get("$id", n.get("id"))
            if isinstance(nid, str) and not nid.startswith("#"):
                b = urljoin(b, nid)
            ref = n.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                out.append(urldefrag(urljoin(b, ref))[0])
            stack.extend((v, b) for k, v in n.items() if k not in ("enum", "const", "examples", "default"))
        elif isinstance(n, list):
            stack.extend((v, b) for v in n)
    return out


def resources_for(git: Git, schema: Any, uri: str, budget: int) -> dict[str, Any] | None:
    """Documents the schema `$ref`s on SchemaStore, keyed by URI; None if one is missing or too large."""
    out: dict[str, Any] = {}
    todo = [(schema, uri)]
    size = 0
    while todo:
        doc, base = todo.pop()
        for target in _refs(doc, base):
            if target in out or target == uri or target == urldefrag(uri)[0]:
                continue
            if not target.startswith(STORE):
                return None
            try:
                text = git.show("src/schemas/json/" + target.removeprefix(STORE))
                sub = json.loads(text)
            except (subprocess.CalledProcessError, json.JSONDecodeError):
                return None
            size += len(text)
            if size > budget:
                return None
            out[target] = sub
            todo.append((sub, target))
    return out


def _agrees(schema: Any, value: Any, valid: bool, resources: dict[str, Any]) -> bool:
    errs = validate_value(schema, value, resources)
    if any(e.startswith(("cannot validate", "invalid schema")) for e in errs):
        return False
    return (not errs) == valid


def build(git: Git, max_schema: int, max_example: int) -> list[dict[str, Any]]:
    skip = set(re.findall(r'"([^"]+\.json)"', _skiptest(git)))
    negatives = set(git.dirs("src/negative_test"))
    records = []
    for name in git.dirs("src/test"):
        if name + ".json" in skip:
            continue
        try:
            text = git.show(f"src/schemas/json/{name}.json")
        except subprocess.CalledProcessError:
            continue
        if len(text) > max_schema:
            continue
        try:
            schema = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(schema, dict):
            continue
        uri = STORE + name + ".json"
        own = schema.get("$id", schema.get("id"))
        resources = resources_for(git, schema, own if isinstance(own, str) else uri, 2 * max_schema)
        if resources is None:
            continue
        kinds: dict[str, list[dict[str, Any]]] = {"valid": [], "invalid": []}
        for kind, folder in (("valid", "src/test"), ("invalid", "src/negative_test")):
            if kind == "invalid" and name not in negatives:
                continue
            for path in git.ls(f"{folder}/{name}"):
                if len(kinds[kind]) >= MAX_PER_KIND:
                    break
                try:
                    value = parse_example(path, git.show(path))
                except Exception:  # unparseable examples are simply not selected
                    continue
                if len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()) > max_example:
                    continue
                if _agrees(schema, value, kind == "valid", resources):
                    kinds[kind].append({"file": path.rsplit("/", 1)[-1], "data": value})
        if kinds["valid"]:
            records.append({"name": name, "schema": schema, "resources": resources, **kinds})
    return records


def _skiptest(git: Git) -> str:
    text = git.show("src/schema-validation.jsonc").decode()
    m = re.search(r'"skiptest"\s*:\s*\[(.*?)\]', text, re.S)
    return m.group(1) if m else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("git_dir", type=Path)
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--max-schema-bytes", type=int, default=64 * 1024)
    ap.add_argument("--max-example-bytes", type=int, default=8 * 1024)
    args = ap.parse_args()
    git = Git(args.git_dir, args.rev)
    records = build(git, args.max_schema_bytes, args.max_example_bytes)
    OUT.mkdir(parents=True, exist_ok=True)
    with gzip.open(OUT / "corpus.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n")
    meta = {"source": "https://github.com/SchemaStore/schemastore", "commit": git.commit(),
            "schemas": len(records), "valid": sum(len(r["valid"]) for r in records),
            "invalid": sum(len(r["invalid"]) for r in records),
            "max_schema_bytes": args.max_schema_bytes, "max_example_bytes": args.max_example_bytes}
    (OUT / "selection.json").write_text(json.dumps(meta, indent=1) + "\n")
    (OUT / "LICENSE").write_bytes(git.show("LICENSE"))
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
