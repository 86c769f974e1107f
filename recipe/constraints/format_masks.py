"""Masks inside JSON strings with a `format` (or an anchored `pattern`), composed from what they depend on.

Inside such a string llguidance's parser waits for the string lexeme to end, and the lexeme is `"R"` with
R the format's regex (`string_formats`), whose bytes JSON leaves as they are (`format_dfa`). Take the
minimal DFA state q of the text so far (no backslash in it). A token is then allowed exactly when:

* it has no `"`: its bytes keep R alive from q. That depends on q alone, not on where the string stands,
  so `inner(q)` (the mask without the tokens holding a quote) learned from one llguidance mask at q serves
  every later position at q, in any string with the same regex and any request over the vocabulary;
* it is `u"v`: u takes q to acceptance (the DFA says which: `T(q)`) and v may follow the string. Whether
  v may follow depends on the parser state, fixed while this string is open, and not on q: it is learned
  per string from llguidance's masks (the bits of `T(q1)` at any q1 llguidance filled) or asked with
  `validate_tokens` for one token of that v. Two rules spare most questions: a v whose proper prefix may
  not follow cannot either, and in llguidance's JSON grammar a value string is followed only by
  whitespace (`[ \t\n\r]`), `,`, `}`, `]` or the end, so a v starting with any other byte may not.

Only states where the text may go on in two ways at least (two possible next bytes, the closing quote
counting as one) qualify: where the next byte is forced, llguidance forces it and masks with the forced
bytes' canonical tokenization, which depends on the last token and, when the forcing runs past the
quote, on what follows the string (a top-level `"a@[1.2.3.4` allows only `]"`, inside an object `]` too).
`FormatTable.open[q]` says which states qualify.

`FormatTable` holds one regex's DFA, `T(q)` and the learned `inner(q)`, shared per vocabulary.
`FormatMasks` is one matcher's per-string knowledge and does the composing. Every time llguidance fills a
mask in such a string the table checks that no quote-holding token outside `T(q)` was allowed, nor one
whose v starts outside that follow set; if one ever were, the table stops reusing for good.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from recipe.constraints.format_dfa import ByteDfa
from recipe.constraints.vocabulary import Vocabulary

_MAX_TABLES = 32  # regexes kept per vocabulary (formats and distinct patterns), least recently used dropped
_MAX_INNER = 256  # inner masks kept per table (16 KiB each over 129,280 ids): at most 4 MiB a regex
_MAX_STEPS = 200_000  # memoised (state, token) moves per table, cleared when full
FOLLOW = frozenset(b" \t\n\r,}]")  # the bytes that may come right after a JSON value string


@dataclass(frozen=True)
class QuoteTokens:
    """The ids whose bytes hold a `"`: split at the first quote into u (before) and v (after); `vclass` numbers
    the distinct v, `prefixes[c]` the classes whose v is a proper prefix of class c's, `unknown[c]` -1 where
    class c's v is empty or starts with a `FOLLOW` byte, else 0 (may not follow). `not_quote` is a full mask
    (uint32 words) with exactly these ids cleared."""

    ids: np.ndarray
    u: tuple[bytes, ...]
    vclass: np.ndarray
    prefixes: tuple[tuple[int, ...], ...]
    unknown: np.ndarray
    not_quote: np.ndarray
    words: np.ndarray
    bits: np.ndarray


def quote_tokens(vocab: Vocabulary) -> QuoteTokens:
    def build() -> QuoteTokens:
        ids, us, vs = [], [], []
        for i, b in enumerate(vocab.token_bytes):
            if b is not None and b'"' in b:
                k = b.index(b'"')
                ids.append(i)
                us.append(b[:k])
                vs.append(b[k + 1 :])
        distinct = sorted(set(vs), key=lambda v: (len(v), v))
        number = {v: n for n, v in enumerate(distinct)}
        prefixes = tuple(tuple(number[v[:j]] for j in range(len(v)) if v[:j] in number) for v in distinct)
        arr = np.array(ids, dtype=np.int64)
        words = (arr >> 5).astype(np.intp)
        bits = (np.uint32(1) << (arr & 31).astype(np.uint32)).astype(np.uint32)
        not_quote = np.full((vocab.vocab_size + 31) // 32, 0xFFFFFFFF, dtype=np.uint32)
        np.bitwise_and.at(not_quote, words, ~bits)
        unknown = np.array([-1 if not v or v[0] in FOLLOW else 0 for v in distinct], dtype=np.int8)
        return QuoteTokens(arr, tuple(us), np.array([number[v] for v in vs], dtype=np.intp), prefixes, unknown,
                           not_quote, words, bits)

    return vocab.backend_state("json_quote_tokens", build)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Closing:
    """`T(q)`: the quote-holding ids whose u takes q to acceptance, their v classes, words and bits; `asks`
    (class, one id of it) per distinct class, shortest v first."""

    ids: np.ndarray
    vclass: np.ndarray
    words: np.ndarray
    bits: np.ndarray
    asks: tuple[tuple[int, int], ...]


class FormatTable:
    """One regex over one vocabulary: its DFA, `T(q)` per state (computed on first use) and `inner(q)` once
    llguidance has filled a mask at q. `step_token` memoises a plain token's move between states."""

    def __init__(self, dfa: ByteDfa, vocab: Vocabulary) -> None:
        self.dfa = dfa
        self.quotes = quote_tokens(vocab)
        width = [0] * len(dfa.table[0])  # bytes per class
        for c in dfa.classes:
            width[c] += 1
        self.open = tuple(sum(w for w, t in zip(width, row, strict=True) if t >= 0) + (q in dfa.accepting) >= 2
                          for q, row in enumerate(dfa.table))
        self.inner: list[np.ndarray | None] = [None] * dfa.size
        self._kept = 0
        self._closing: list[Closing | bool | None] = [False] * dfa.size  # False: not computed yet
        self._steps: dict[tuple[int, int], int] = {}
        self._pieces = vocab.piece
        self.broken = False

    def step_token(self, q: int, token_id: int) -> int:
        key = (q, token_id)
        nxt = self._steps.get(key)
        if nxt is None:
            if len(self._steps) >= _MAX_STEPS:
                self._steps.clear()
            nxt = self._steps[key] = self.dfa.run(q, self._pieces(token_id))
        return nxt

    def closing(self, q: int) -> Closing | None:
        got = self._closing[q]
        if got is False:
            dfa, qt = self.dfa, self.quotes
            sel = [k for k, u in enumerate(qt.u) if dfa.run(q, u) in dfa.accepting]
            idx = np.array(sel, dtype=np.intp)
            asks: dict[int, int] = {}
            for k in sel:
                asks.setdefault(int(qt.vclass[k]), int(qt.ids[k]))
            got = Closing(qt.ids[idx], qt.vclass[idx], qt.words[idx], qt.bits[idx],
                          tuple(sorted(asks.items()))) if sel else None
            self._closing[q] = got
        return got  # type: ignore[return-value]

    def learn(self, q: int, mask: np.ndarray) -> bool:
        """Check llguidance's `mask` at q against `T(q)` and keep its inner part; False (and the table stops
        reusing) when a quote-holding id outside `T(q)` is allowed."""
        qt = self.quotes
        hit = (mask[qt.words] & qt.bits) != 0
        allowed = qt.ids[hit]
        cl = self.closing(q)
        if allowed.size and (cl is None or not np.isin(allowed, cl.ids).all() or (qt.unknown[qt.vclass[hit]] == 0).any()):
            self.broken = True
            return False
        if self.inner[q] is None and self._kept < _MAX_INNER:
            self.inner[q] = mask & qt.not_quote
            self._kept += 1
        return True


class FormatTables:
    """The tables of one vocabulary, by regex (bounded, least recently used dropped)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self._vocab = vocab
        self._tables: OrderedDict[ByteDfa, FormatTable] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, dfa: ByteDfa) -> FormatTable:
        with self._lock:
            table = self._tables.get(dfa)
            if table is None:
                table = self._tables[dfa] = FormatTable(dfa, self._vocab)
                if len(self._tables) > _MAX_TABLES:
                    self._tables.popitem(last=False)
            else:
                self._tables.move_to_end(dfa)
            return table


def format_tables(vocab: Vocabulary) -> FormatTables:
    return vocab.backend_state("json_format_tables", lambda: FormatTables(vocab))  # type: ignore[no-any-return]


class FormatMasks:
    """One matcher's composer: what it knows, in the current string, of which v may follow the string."""

    __slots__ = ("_known", "_string")

    def __init__(self) -> None:
        self._string: Any = None
        self._known: np.ndarray | None = None  # per v class: -1 unknown, 0 may not follow, 1 may

    def forget(self) -> None:
        """After a rollback: the string at the same id may now stand where other text follows."""
        self._string = None

    def _known_for(self, string_id: Any, table: FormatTable) -> np.ndarray:
        if self._string != string_id or self._known is None:
            unknown = table.quotes.unknown
            if self._known is None or self._known.shape != unknown.shape:
                self._known = np.empty_like(unknown)
            np.copyto(self._known, unknown)
            self._string = string_id
        return self._known

    def ready(self, key: tuple[Any, FormatTable, int]) -> bool:
        """Whether `fill` composes the mask at `key` (no llguidance mask needed)."""
        _, table, q = key
        return table.inner[q] is not None and not table.broken

    def fill(self, key: tuple[Any, FormatTable, int], out: np.ndarray, matcher: Any) -> bool:
        """Compose the mask at `key` into `out` (int32 words); `matcher` (llguidance, at this position) answers
        `validate_tokens` for a v not yet known. False when not `ready`."""
        string_id, table, q = key
        inner = table.inner[q]
        if inner is None or table.broken:
            return False
        u = out.view(np.uint32)
        np.copyto(u, inner)
        cl = table.closing(q)
        if cl is None:
            return True
        known = self._known_for(string_id, table)
        k = known[cl.vclass]
        if (k < 0).any():
            self._resolve(table, cl, known, matcher)
            k = known[cl.vclass]
        sel = k > 0
        if sel.any():
            np.bitwise_or.at(u, cl.words[sel], cl.bits[sel])
        return True

    def learn(self, key: tuple[Any, FormatTable, int], out: np.ndarray) -> None:
        """llguidance filled `out` at `key`: keep inner(q) and which v may follow (the bits of T(q))."""
        string_id, table, q = key
        u = out.view(np.uint32)
        if table.broken or not table.learn(q, u):
            return
        cl = table.closing(q)
        if cl is not None:
            known = self._known_for(string_id, table)
            known[cl.vclass] = (u[cl.words] & cl.bits) != 0

    @staticmethod
    def _resolve(table: FormatTable, cl: Closing, known: np.ndarray, matcher: Any) -> None:
        prefixes = table.quotes.prefixes
        kn = known.tolist()
        for c, token in cl.asks:  # shorter v first: its prefixes are decided before it
            if kn[c] >= 0:
                continue
            if any(kn[p] == 0 for p in prefixes[c]):
                kn[c] = 0
            else:
                kn[c] = 1 if matcher.validate_tokens([token]) == 1 else 0
        known[:] = kn
