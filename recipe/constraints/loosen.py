"""What the mask cannot enforce, moved to the post-generation check (`strict=False`) without sinking the rest.

Every step here returns a schema whose instances are a *superset* of the input's (never a subset: a valid
document must stay reachable) and names the keywords it loosened, which the keyword report lists as
post-checked and `strict=True` refuses.

* `prepare(schema)`, before compiling: ECMA-262 regexes (`pattern`, `patternProperties` keys) in the Rust
  syntax the backend reads; zero-width assertions (look-ahead, look-behind, `\\b`) removed, which only
  widens a pattern; a `patternProperties` entry whose key loses an assertion is folded into
  `additionalProperties` (keys it matched may now take either schema); integer bounds beyond ±2^62
  (the backend's integer ranges overflow there) dropped; `minProperties`/`maxProperties` beside optional
  `properties` and other possible keys dropped (the backend cannot count them there).
* `after_error(schema, message)`, when the backend still refuses: the regex it names, if the validator can
  read it, dropped (a `pattern`) or folded (a `patternProperties` key); two overlapping `patternProperties` merged into one
  entry taking either schema; numeric bounds it cannot range-check dropped.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

from recipe.constraints.drafts import SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_ONE

_ASSERTIONS = ("(?=", "(?!", "(?<=", "(?<!")
_HUGE = 2**62
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _close(p: str, i: int) -> int | None:
    """Index of the `)` closing the group opened at `p[i]`."""
    depth, in_class = 0, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if p[i + 1 : i + 2] == "]":
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


_CONTROLS = [chr(c) for c in range(32) if c != 10]  # newline aside: see `_escape_safe_class`


class EscapeFix:
    """Off switch of `_escape_safe_class` (the backend then gets the class as written)."""

    enabled: ClassVar[bool] = True


def _escape_safe_class(cls: str) -> str | None:
    """A character class (Rust syntax, `[...]`) the backend reads right inside a JSON string.

    The backend, given a class that admits every control character (newline included or not), also admits
    both `\\"` and `\\\\` there (measured with llguidance 1.9.1: `[^\\\\]` passes a backslash, `[^"]` and
    `[^"\\n]` a quote; `[^"\\x00]` and `[^"\\t]` are read right). A negated class that admits every control
    character but newline, and not both of `"` and `\\`, therefore also excludes NUL (`\\x00`):
    a subset, which only refuses a raw NUL there. A positive class of that kind returns None (the pattern is
    then post-checked). A negated class Python's `re` cannot read also excludes NUL; any other is unchanged."""
    if not EscapeFix.enabled:
        return cls
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rx = re.compile(cls)
    except (re.error, OverflowError, RecursionError):
        return "[^\\x00" + cls[2:] if cls.startswith("[^") else cls  # unread (e.g. `\\p{..}`): NUL out, to be safe
    if not all(rx.fullmatch(c) for c in _CONTROLS) or (rx.fullmatch('"') and rx.fullmatch("\\")):
        return cls
    if cls.startswith("[^"):
        return "[^\\x00" + cls[2:]
    return None


def translate_regex(p: str) -> tuple[str, bool] | None:
    """(Rust-syntax regex, exact) for an ECMA-262 pattern; exact is False when assertions were removed
    (the result matches a superset). None when the pattern cannot be read."""
    out: list[str] = []
    exact = True
    i, in_class, class_at = 0, False, 0
    while i < len(p):
        c = p[i]
        if c == "\\":
            if i + 1 >= len(p):
                return None
            if not in_class and p[i + 1] in "bB":
                exact = False
                i += 2
                continue
            out.append(p[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
                fixed = _escape_safe_class("".join(out[class_at:]) + "]")
                if fixed is None:
                    exact = False
                elif fixed != "".join(out[class_at:]) + "]":
                    del out[class_at:]
                    out.append(fixed)
                    i += 1
                    continue
            out.append("\\" + c if c in "[&~" else c)  # literal in ECMA, set syntax in Rust
            i += 1
            continue
        if c == "[":
            in_class = True
            class_at = len(out)
            out.append(c)
            i += 1
            if p[i : i + 1] == "^":
                out.append("^")
                i += 1
            if p[i : i + 1] == "]":
                out.append("\\]")
                i += 1
            continue
        if p.startswith(_ASSERTIONS, i):
            j = _close(p, i)
            if j is None or p[j + 1 : j + 2] in ("*", "+", "?", "{"):
                return None
            exact = False
            i = j + 1
            continue
        out.append(c)
        i += 1
    if in_class:
        return None
    return "".join(out), exact


def _walk(schema: Any, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """Apply `fn` bottom-up to every schema object (root `$defs` entries included)."""
    if isinstance(schema, list):
        return [_walk(x, fn) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in SCHEMA_MAPS or k == "$defs":
            out[k] = {pk: _walk(pv, fn) for pk, pv in v.items()} if isinstance(v, dict) else v
        elif k in SCHEMA_LISTS or k in SCHEMA_ONE:
            out[k] = _walk(v, fn)
        else:
            out[k] = v
    return fn(out)


def _fold_pattern_property(node: dict[str, Any], key: str) -> dict[str, Any]:
    """Drop one `patternProperties` entry; keys it matched may take its schema or additionalProperties."""
    pats = dict(node["patternProperties"])
    sub = pats.pop(key)
    out = dict(node)
    if pats:
        out["patternProperties"] = pats
    else:
        out.pop("patternProperties")
    add = node.get("additionalProperties", True)
    if add is not True and add != {}:
        out["additionalProperties"] = sub if add is False else {"anyOf": [add, sub]}
    return out


def prepare(schema: Any) -> tuple[Any, set[str]]:
    loosened: set[str] = set()

    def fix(node: dict[str, Any]) -> dict[str, Any]:
        if isinstance(node.get("pattern"), str):
            t = translate_regex(node["pattern"])
            if t is None:
                node.pop("pattern")
                loosened.add("pattern")
            else:
                node["pattern"] = t[0]
                if not t[1]:
                    loosened.add("pattern")
        if isinstance(node.get("patternProperties"), dict):
            for key in list(node["patternProperties"]):
                t = translate_regex(key)
                if t is None or not t[1]:
                    node = _fold_pattern_property(node, key)
                    loosened.add("patternProperties")
                elif t[0] != key:
                    pats = node["patternProperties"]
                    node["patternProperties"] = {(t[0] if k == key else k): v for k, v in pats.items()}
        if ("minProperties" in node or "maxProperties" in node) and isinstance(node.get("properties"), dict) \
                and (node.get("additionalProperties", True) is not False or node.get("patternProperties")) \
                and not set(node["properties"]) <= set(node.get("required") or []):
            # the backend refuses these counts here, and its lenient mode would count only unlisted keys
            loosened.update(k for k in ("minProperties", "maxProperties") if k in node)
            node = {k: v for k, v in node.items() if k not in ("minProperties", "maxProperties")}
        for b in _BOUNDS:
            v = node.get(b)
            if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) >= _HUGE:
                node.pop(b)
                loosened.add(b)
        return node

    return _walk(schema, fix), loosened


def _valid(pattern: str) -> bool:
    """A regex the post-generation validator can read (a malformed one is the caller's error, not loosened)."""
    try:
        re.compile(pattern)
    except (re.error, OverflowError):
        return False
    return True


def _remote_named(uri: str, message: str) -> bool:
    """`message` names the document `uri` points at: as written, or (a relative reference the backend resolved
    against its own base) with its leading `./` and `../` segments gone."""
    tail = re.sub(r"^(?:\.\.?/)+", "", uri)
    return uri in message or (tail != uri and f"/{tail}'" in message)


def after_error(schema: Any, message: str) -> tuple[Any, set[str]] | None:
    """A looser schema for a backend refusal, or None when the message names nothing to loosen."""
    loosened: set[str] = set()
    if "not disjoint" in message:
        def merge_overlap(node: dict[str, Any]) -> dict[str, Any]:
            pats = node.get("patternProperties")
            if not isinstance(pats, dict):
                return node
            hits = [k for k in pats if f"/{k}/" in message]
            if len(hits) < 2:
                return node
            a, b = hits[:2]
            merged = {k: v for k, v in pats.items() if k not in (a, b)}
            merged[f"(?:{a})|(?:{b})"] = {"anyOf": [pats[a], pats[b]]}
            loosened.add("patternProperties")
            return {**node, "patternProperties": merged}

        def fold_overlap(node: dict[str, Any]) -> dict[str, Any]:
            # the two patterns sit in different schemas the backend intersects: fold them away there
            for key in [k for k in node.get("patternProperties") or {} if f"/{k}/" in message]:
                loosened.add("patternProperties")
                node = _fold_pattern_property(node, key)
            return node

        out = _walk(schema, merge_overlap)
        if not loosened:
            out = _walk(schema, fold_overlap)
        return (out, loosened) if loosened else None
    if "regex" in message or "look-around" in message or "lookaround" in message:
        def drop_regex(node: dict[str, Any]) -> dict[str, Any]:
            if isinstance(node.get("pattern"), str) and node["pattern"] in message and _valid(node["pattern"]):
                loosened.add("pattern")
                node = {k: v for k, v in node.items() if k != "pattern"}
            if isinstance(node.get("patternProperties"), dict):
                for key in [k for k in node["patternProperties"] if k in message and _valid(k)]:
                    loosened.add("patternProperties")
                    node = _fold_pattern_property(node, key)
            return node

        out = _walk(schema, drop_regex)
        if loosened:
            return out, loosened
    if "not present in a registry" in message or "retrieving it failed" in message:
        remote: list[str] = []

        def find_remote(node: dict[str, Any]) -> dict[str, Any]:
            if isinstance(node.get("$ref"), str) and not node["$ref"].startswith("#"):
                remote.append(node["$ref"].split("#")[0])
            return node

        _walk(schema, find_remote)
        if not any(_remote_named(uri, message) for uri in remote):
            return None

        def drop_remote(node: dict[str, Any]) -> dict[str, Any]:
            # the named document and, as the backend fetches nothing, every other remote one
            if isinstance(node.get("$ref"), str) and not node["$ref"].startswith("#"):
                loosened.add("$ref")
                return {k: v for k, v in node.items() if k != "$ref"}
            return node

        out = _walk(schema, drop_remote)
        return (out, loosened) if loosened else None
    if "integer range" in message or "number range" in message:
        def drop_bounds(node: dict[str, Any]) -> dict[str, Any]:
            hit = [b for b in _BOUNDS if b in node and json.dumps(node[b]) in message]
            loosened.update(hit)
            return {k: v for k, v in node.items() if k not in hit}

        out = _walk(schema, drop_bounds)
        return (out, loosened) if loosened else None
    return None


_EXPLAINED = (
    ("circular references with sibling keys", "a recursive `$ref` (`#/$defs/recipe_N` is Recipe's bundled copy of its "
     "target) that the backend would have to intersect with sibling keywords or other anyOf/oneOf branches"),
    ("schema too large", "the grammar is over the backend's size limit even with shared definitions and without "
     "negation rewrites"),
    ("intersection stack level exceeded", "allOf/$ref intersections nested deeper than the backend allows"),
)


def explain(message: str) -> str:
    """The backend's refusal of a schema nothing is left to loosen in, with what it means for the schema."""
    for phrase, meaning in _EXPLAINED:
        if phrase in message:
            return f"{message} ({meaning}; not even a loosened mask can be built for this schema)"
    return message
