"""Where a JSON matcher's mask repeats: inside a string value whose text is free or only length-bounded.

Inside a string governed by exactly `{"type": "string"}` (annotations aside) or by an any-value schema,
llguidance's state does not move while plain characters or complete escapes are consumed: the parser
waits for the string lexeme to end, and the lexer's derivative-based DFA maps the string's regex back to
the same state (for S = (char | escape)*, the derivative of S" by a char is S" again). The mask is a
function of that state, so the mask computed at one such position serves every later one in the same
string, until a quote ends it. Everything before the opening quote fixes what may follow the string.

With `minLength` m and `maxLength` M the state counts characters, but the mask (the ids whose bytes keep
the output a viable prefix) is the same at every position with at least m characters so far and room for
the longest token (`PlainTokens.longest` bytes) before M: no id's text can reach either bound there, so
each id is allowed or refused for the same reason at all of them. llguidance's masks are exactly that set.

`StringTracker` follows the accepted bytes (JSON structure and the schema that governs each value) and
sets `key` to an id of the current string while the matcher is at such a position, None elsewhere. A
value whose schema it cannot resolve exactly (combinators, `$ref`, `patternProperties`, `prefixItems`, any
keyword outside its short lists) gets no key; so does a position inside an escape or a character split
across tokens, and a string once a `\\u` escape appears in it (a surrogate pair may have its own lexer
states). Tests compare every mask against the same matcher with reuse off
(`tests/constraints/test_string_masks.py`).

Inside a string whose schema is exactly a known `format` or an anchored `pattern`, the tracker also
follows the text through the regex's DFA and sets `format_key` where `format_masks` composes the mask
(`tests/constraints/test_format_masks.py`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from recipe.constraints.format_dfa import ByteDfa, Unsupported, pattern_dfa, string_dfa
from recipe.constraints.format_masks import FormatTable, format_tables
from recipe.constraints.string_formats import FORMAT_REGEX
from recipe.constraints.vocabulary import Vocabulary

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly", "$schema"})
_STRING_KEYS = _ANNOTATIONS | {"type", "minLength", "maxLength"}
_OBJECT_KEYS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "minProperties",
                               "maxProperties"}
_ARRAY_KEYS = _ANNOTATIONS | {"type", "items", "minItems", "maxItems"}

ANY = True  # the any-value schema, as resolved here
UNKNOWN = None  # a value whose governing schema is not resolved exactly: no reuse inside it

_STRUCTURE = tuple(bytes((c,)) for c in b'"{}[],:')
_OUT, _VALUE, _KEY = 0, 1, 2  # where the tracker is: between tokens of structure, in a value string, in a key


@dataclass(frozen=True)
class PlainTokens:
    """Per id: its character count when its bytes are complete UTF-8 with no quote or backslash (it can
    neither end nor escape a string), else 0; its byte length then; whether it holds none of `"{}[],:`
    (outside strings it moves no structure: digits, literals, whitespace); the longest token in bytes."""

    chars: list[int]
    nbytes: list[int]
    inert: bytearray
    longest: int


def plain_tokens(vocab: Vocabulary) -> PlainTokens:
    def build() -> PlainTokens:
        chars = [0] * vocab.vocab_size
        nbytes = [0] * vocab.vocab_size
        inert = bytearray(vocab.vocab_size)
        longest = 0
        for i, b in enumerate(vocab.token_bytes):
            if b is None:
                continue
            longest = max(longest, len(b))
            inert[i] = not any(c in b for c in _STRUCTURE)
            if b'"' in b or b"\\" in b:
                continue
            try:
                text = b.decode("utf-8")
            except UnicodeDecodeError:
                continue
            chars[i], nbytes[i] = len(text), len(b)
        longest = max([longest, *(len(b) for b in vocab.added_bytes.values())])
        return PlainTokens(chars, nbytes, inert, longest)

    return vocab.backend_state("json_plain_tokens", build)  # type: ignore[no-any-return]


def _is_any(node: Any) -> bool:
    return node is True or (isinstance(node, dict) and node.keys() <= _ANNOTATIONS)


def _string_bounds(node: Any) -> tuple[int, int | None] | None:
    """(minLength, maxLength or None) of a string schema with no other assertion; None otherwise."""
    if node is UNKNOWN:
        return None
    if _is_any(node):
        return (0, None)
    if not isinstance(node, dict) or node.get("type") != "string" or not node.keys() <= _STRING_KEYS:
        return None
    lo, hi = node.get("minLength", 0), node.get("maxLength")
    if not isinstance(lo, int) or isinstance(lo, bool) or (hi is not None and (not isinstance(hi, int)
                                                                               or isinstance(hi, bool))):
        return None
    return (lo, hi)


def _string_regex(node: Any) -> ByteDfa | None:
    """The DFA of a string schema whose only assertion is a known `format` or an anchored `pattern`."""
    if not isinstance(node, dict) or node.get("type") != "string":
        return None
    fmt, pattern = node.get("format"), node.get("pattern")
    if node.keys() <= _ANNOTATIONS | {"type", "format"} and isinstance(fmt, str) and fmt in FORMAT_REGEX:
        return _regex_dfa(FORMAT_REGEX[fmt], False)
    if node.keys() <= _ANNOTATIONS | {"type", "pattern"} and isinstance(pattern, str):
        return _regex_dfa(pattern, True)
    return None


@functools.lru_cache(maxsize=256)
def _regex_dfa(regex: str, is_pattern: bool) -> ByteDfa | None:
    """`pattern_dfa(regex)` or `string_dfa(regex)`, None where it raises `Unsupported`. The refusal is kept
    too: the tracker asks at every string it opens, and an unreadable pattern would be parsed (and perhaps
    its DFA built up to the state bound) again each time."""
    try:
        return pattern_dfa(regex) if is_pattern else string_dfa(regex)
    except Unsupported:
        return None


def _property(node: Any, key: str | None) -> Any:
    """The schema of `key`'s value in an object governed by `node`."""
    if node is UNKNOWN or key is None:
        return UNKNOWN
    if _is_any(node):
        return ANY
    if not isinstance(node, dict) or not node.keys() <= _OBJECT_KEYS or node.get("type", "object") != "object":
        return UNKNOWN
    props = node.get("properties", {})
    if not isinstance(props, dict):
        return UNKNOWN
    if key in props:
        return _child(props[key])
    return _child(node.get("additionalProperties", True))


def _items(node: Any) -> Any:
    """The schema of every item of an array governed by `node`."""
    if node is UNKNOWN:
        return UNKNOWN
    if _is_any(node):
        return ANY
    if not isinstance(node, dict) or not node.keys() <= _ARRAY_KEYS or node.get("type", "array") != "array":
        return UNKNOWN
    return _child(node.get("items", True))


def _child(node: Any) -> Any:
    if node is True:
        return ANY
    return node if isinstance(node, dict) else UNKNOWN


def worth_tracking(schema: Any, vocab: Vocabulary) -> bool:
    """Whether `schema` has a string whose length bounds leave a band (above) for some reuse to happen, or a
    string with a format or anchored pattern (`format_masks`).

    llguidance computes a mask inside a free string in a few µs already (bench/constraints.py free_text:
    ~6 µs with reuse or without), while following the bytes costs about 1-2 µs per accepted id; the large
    saving is inside long length-bounded strings (long_string: ~26 → ~3 µs) and inside formats (a `uri`
    costs llguidance 150-190 µs per token), so only those turn it on."""
    longest = plain_tokens(vocab).longest
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            bounds = _string_bounds(node)
            if bounds is not None and bounds[1] is not None and bounds[1] > longest + bounds[0]:
                return True
            if _string_regex(node) is not None:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


class StringTracker:
    """Follows one matcher's accepted token bytes; `key` is set exactly where the mask repeats (above), and
    `format_key` (string id, `FormatTable`, DFA state) inside a string with a format or anchored pattern
    while its text has no backslash and is still a prefix of the regex's language, at a state where the
    text may go on in two ways at least (`format_masks`).

    `advance(id)` after each accepted id, `rollback(n)` with the matcher's. The state is one tuple,
    stacked per accepted id for rollback. `formats=False` leaves `format_key` None throughout.
    """

    __slots__ = ("_formats", "_history", "_inert", "_longest", "_pieces", "_plain_bytes", "_plain_chars", "_state",
                 "_tables", "format_key", "key")

    def __init__(self, schema: Any, vocab: Vocabulary, *, formats: bool = True) -> None:
        plain = plain_tokens(vocab)
        self._pieces = vocab.piece
        self._plain_chars, self._plain_bytes, self._longest = plain.chars, plain.nbytes, plain.longest
        self._inert = plain.inert
        self._formats = formats
        self._tables = format_tables(vocab)
        # (where, frames, expect_key, value_schema, bounds, esc, pending, key_bytes, last_key, string_id,
        #  nbytes, nchars, table, q): frames are linked (is_object, schema, parent) tuples; bounds the current
        # value string's (minLength, maxLength) when its text is otherwise free, else None; esc -1 after a
        # backslash, n > 0 with n hex digits to go; nbytes/nchars the string's text so far; table the
        # current value string's `FormatTable` (None when it has no format), q its DFA state (-1: none)
        self._state: tuple[Any, ...] = (_OUT, None, False, _child(schema), None, 0, 0, b"", "", None, 0, 0, None, -1)
        self._history: list[tuple[Any, ...]] = []
        self.key: tuple[int, int] | None = None
        self.format_key: tuple[tuple[int, int], FormatTable, int] | None = None

    def advance(self, token_id: int) -> None:
        st = self._state
        self._history.append(st)
        if st[0] == _OUT and self._inert[token_id]:
            return  # a number, literal or whitespace between values: nothing moves, keys stay None
        if st[5] == 0 and st[6] == 0 and self._plain_chars[token_id]:
            if st[0] == _VALUE and st[4] is not None:  # plain text inside a string: only the counts move
                self._state = (*st[:10], st[10] + self._plain_bytes[token_id], st[11] + self._plain_chars[token_id],
                               None, -1)
                self._set_key()
                return
            if st[0] == _VALUE and st[12] is not None:  # plain text inside a format string: the DFA moves
                q = st[12].step_token(st[13], token_id) if st[13] >= 0 else -1
                self._state = (*st[:13], q)
                self._set_key()
                return
            if st[0] == _KEY:
                self._state = (*st[:7], st[7] + self._pieces(token_id), *st[8:])
                return
        self._state = self._scan(st, self._pieces(token_id), len(self._history) - 1, self._open_table)
        self._set_key()

    def rollback(self, n: int) -> None:
        if n <= 0:
            return
        self._state = self._history[-n]
        del self._history[-n:]
        self._set_key()

    def _open_table(self, schema: Any) -> FormatTable | None:
        if not self._formats:
            return None
        dfa = _string_regex(schema)
        return self._tables.get(dfa) if dfa is not None else None

    def _set_key(self) -> None:
        where, _, _, _, bounds, esc, pending, _, _, string_id, nbytes, nchars, table, q = self._state
        inside = where == _VALUE and not esc and not pending
        if inside and bounds is not None and nchars >= bounds[0] and (
                bounds[1] is None or nbytes + self._longest <= bounds[1]):
            self.key = string_id
        else:
            self.key = None
        self.format_key = (string_id, table, q) if inside and table is not None and q >= 0 and table.open[q] else None

    @staticmethod
    def _scan(st: tuple[Any, ...], data: bytes, token_index: int, open_table: Any) -> tuple[Any, ...]:
        (where, frames, expect_key, value_schema, bounds, esc, pending, key_bytes, last_key, string_id, nbytes,
         nchars, table, q) = st
        for i, b in enumerate(data):
            if where == _OUT:
                if b == 0x22:  # "
                    if expect_key:
                        where, key_bytes = _KEY, b""
                    else:
                        where, bounds, string_id = _VALUE, _string_bounds(value_schema), (token_index, i)
                        nbytes = nchars = 0
                        table = open_table(value_schema) if bounds is None else None
                        q = 0 if table is not None else -1
                elif b == 0x7B:  # {
                    frames = (True, value_schema, frames)
                    expect_key = True
                elif b == 0x5B:  # [
                    frames = (False, value_schema, frames)
                    value_schema, expect_key = _items(value_schema), False
                elif b == 0x3A:  # :
                    value_schema = _property(frames[1], last_key) if frames is not None else UNKNOWN
                elif b == 0x2C:  # ,
                    if frames is not None and frames[0]:
                        expect_key = True
                    elif frames is not None:
                        value_schema = _items(frames[1])
                elif b in (0x7D, 0x5D):  # } ]
                    frames = frames[2] if frames is not None else None
                    expect_key = False
                continue
            # inside a string (key or value)
            if where == _KEY:
                key_bytes += bytes((b,))
            if pending:
                pending -= 1
                nbytes += 1
                continue
            if esc:
                if esc == -1:
                    if b == 0x75:  # \u: no reuse for the rest of this string
                        esc, bounds = 4, None
                    else:
                        esc = 0
                else:
                    esc -= 1
                nbytes += 1
                continue
            if b == 0x22:
                if where == _KEY:
                    last_key = _decode_key(key_bytes[:-1])
                    expect_key = False
                where, bounds, string_id, table, q = _OUT, None, None, None, -1
                continue
            if table is not None and q >= 0:  # a backslash or a non-ASCII byte ends the DFA (q = -1)
                q = table.dfa.step(q, b)
            nbytes += 1
            nchars += 1  # an ASCII character, an escape's backslash or a multi-byte character's lead byte
            if b == 0x5C:  # backslash
                esc = -1
            elif b >= 0xF0:
                pending = 3
            elif b >= 0xE0:
                pending = 2
            elif b >= 0xC0:
                pending = 1
        return (where, frames, expect_key, value_schema, bounds, esc, pending, key_bytes, last_key, string_id,
                nbytes, nchars, table, q)


def _decode_key(raw: bytes) -> str | None:
    try:
        out = json.loads(b'"' + raw + b'"')
    except ValueError:
        return None  # resolves to UNKNOWN
    return out if isinstance(out, str) else None
