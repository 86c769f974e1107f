"""`StreamProcessor`: backend updates in, protocol events (and the complete response) out.

One processor serves one choice of one request. Feed it `Ready`, `TextUpdate`/`TokenUpdate`s and
`Finish` (recipe.stream.updates); each `feed` returns the events to send now. `response()` is the
complete (non-stream) body, by definition the accumulation of the events emitted so far. Bad backend
input raises `StreamInputError`; `error_events(message)` then gives the API's mid-stream error events
that close the stream cleanly.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any, ClassVar, Literal

from recipe.conversation import ConversationRequest
from recipe.stream.accumulate import accumulate_chat, accumulate_messages, accumulate_responses
from recipe.stream.chat_events import ChatEventBuilder, ReasoningField, chat_finish_reason
from recipe.stream.dsml import DsmlToolCallParser
from recipe.stream.event_log import EventLog
from recipe.stream.logprobs import LogprobRenderer
from recipe.stream.messages_events import MessagesEventBuilder, messages_stop_reason
from recipe.stream.pieces import Piece, ToolCallStart
from recipe.stream.responses_events import ResponsesEventBuilder
from recipe.stream.sse import Event
from recipe.stream.text_parser import (
    _CONTENT,
    _DONE,
    _REASONING,
    _TOOLS,
    OutputFormat,
    OutputTextParser,
    _extend_tail,
)
from recipe.stream.token_markers import sentinels_for, unmask
from recipe.stream.token_text import UpdateDecoder
from recipe.stream.updates import BackendUpdate, Finish, Ready, StreamInputError, TextUpdate, TokenUpdate
from recipe.stream.usage import Usage, count_ids

Api = Literal["chat", "messages", "responses"]


class StreamProcessor:
    """Parses one choice's output and emits the events of `api` (see module docstring)."""

    # The single-token fast path (tests switch it off to prove it changes nothing).
    fast_paths: ClassVar[bool] = True

    def __init__(
        self,
        api: Api,
        request: ConversationRequest,
        *,
        response_id: str,
        model: str,
        tokenizer: Any = None,
        output_format: OutputFormat = "deepseek_v4",
        created: int | None = None,
        echo: dict[str, Any] | None = None,
        signature: str | None = None,
        reasoning_field: ReasoningField = "reasoning_content",
        choice_index: int = 0,
        emit_done: bool = True,
    ) -> None:
        if api not in ("chat", "messages", "responses"):
            raise ValueError(f"unknown api {api!r}: expected 'chat', 'messages' or 'responses'")
        self.api = api
        self.request = request
        self.tokenizer = tokenizer
        self.created = created if created is not None else int(time.time())
        self.parser = OutputTextParser(request.parsing_options, output_format)
        self.thinking = self.parser.thinking
        self.usage = Usage()
        self._log = EventLog()
        self.finished = False
        self.closed = False
        self._started = False
        self._has_calls = False
        self._emit_done = emit_done
        self._decoder = UpdateDecoder(tokenizer) if tokenizer is not None else None
        self._logprobs = LogprobRenderer(tokenizer) if tokenizer is not None else None
        self._held_logprobs: list[dict[str, Any]] = []  # entries of tokens whose text is not out yet
        self._special_ids: frozenset[int] = frozenset(getattr(tokenizer, "special_ids", ()) or ())
        self._marker_ids = _special_sentinels(tokenizer)
        # id -> text of tokens that are whole UTF-8 on their own (shared, filled by the decoder): the
        # fused one-token path below uses it; None switches that path off
        self._plain = self._decoder.whole_texts if self._decoder is not None and self.fast_paths else None
        if not OutputTextParser.fast_path:
            self._plain = None
        # the same one-step path for text updates (off with either switch)
        self._fast_text = self.fast_paths and OutputTextParser.fast_path
        self._chat: ChatEventBuilder | None = None
        self._messages: MessagesEventBuilder | None = None
        self._responses: ResponsesEventBuilder | None = None
        if api == "chat":
            self._chat = ChatEventBuilder(
                response_id=response_id, model=model, created=self.created, thinking=self.thinking,
                include_usage=request.include_usage, index=choice_index, reasoning_field=reasoning_field,
            )
        elif api == "messages":
            self._messages = MessagesEventBuilder(
                response_id=response_id, model=model, thinking=self.thinking, signature=signature
            )
        else:
            self._responses = ResponsesEventBuilder(response_id=response_id, model=model, created=created, echo=echo)

    # ---- public ---------------------------------------------------------------------------------

    def feed(self, update: BackendUpdate) -> list[Event]:
        """Process one backend update and return the events it completes."""
        if self.closed:
            raise StreamInputError("stream processor is closed")
        if self.finished:
            raise StreamInputError("stream processor has finished: no update may follow the end of output")
        if type(update) is TokenUpdate and update.logprobs is None and self._plain is not None:
            ids = update.token_ids
            if len(ids) == 1:
                text = self._plain.get(ids[0])
                decoder = self._decoder
                # a plain token whose text is whole UTF-8 while no part of a character is held
                # (`decoder.busy`, read directly): `_plain_run` gives exactly `_tokens`' events or None
                if text and self.parser._token_markers and not (decoder._held or decoder._det._pending):  # type: ignore[union-attr]
                    events = self._plain_run(text, 1)
                    if events is not None:
                        self._log.extend(events)
                        return events
        if isinstance(update, TokenUpdate):
            events = self._tokens(update)
            if events:
                self._log.extend(events)
            return events
        if isinstance(update, TextUpdate):
            events = self._text(update)
            if events:
                self._log.extend(events)
            return events
        if isinstance(update, Ready):
            return self._record(self._ready(update))
        if isinstance(update, Finish):
            if update.reason not in ("stop", "length", "content_filter"):
                raise StreamInputError(
                    f"unknown finish reason {update.reason!r}: expected 'stop', 'length' or 'content_filter'"
                )
            return self._record(self._finish(update.reason, explicit=True))
        raise StreamInputError(f"unknown backend update {type(update).__name__}")

    def finish(self) -> list[Event]:
        """End the output without a `Finish` update (as if the backend said `stop`); idempotent."""
        if self.finished or self.closed:
            return []
        return self._record(self._finish("stop", explicit=False))

    @property
    def events(self) -> list[Event]:
        """Every event emitted so far, in order (equal to those `feed` returned; see recipe.stream.event_log)."""
        return self._log.events()

    def response(self) -> dict[str, Any]:
        """The complete response: the accumulation of every event emitted so far."""
        if self.api == "chat":
            return accumulate_chat(self.events, created=self.created)
        if self.api == "messages":
            return accumulate_messages(self.events)
        return accumulate_responses(self.events)

    def error_events(self, message: str) -> list[Event]:
        """Close the stream with the API's mid-stream error (after a `StreamInputError` or a backend failure)."""
        self.closed = True
        if self._chat is not None:
            events = self._chat.error(message)
        elif self._messages is not None:
            events = self._messages.error(message)
        else:
            assert self._responses is not None
            events = self._responses.error(message)
        self._log.extend(events)
        return events

    # ---- internals ------------------------------------------------------------------------------

    def _record(self, events: list[Event]) -> list[Event]:
        self._log.extend(events)
        return events

    def _preamble(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        if self._chat is not None:
            return self._chat.start(in_reasoning=self.parser.starts_in_reasoning)
        if self._messages is not None:
            return self._messages.start(self.usage)
        assert self._responses is not None
        return self._responses.start()

    def _ready(self, update: Ready) -> list[Event]:
        if self._started:
            raise StreamInputError("Ready must be the first backend update")
        if update.prompt_tokens < 0 or not 0 <= update.cached_tokens <= max(update.prompt_tokens, 0):
            raise StreamInputError(
                f"invalid prompt usage: {update.cached_tokens} cached of {update.prompt_tokens} prompt tokens"
            )
        self.usage.prompt_tokens = update.prompt_tokens
        self.usage.cached_tokens = update.cached_tokens
        if self._chat is not None:
            self._chat.system_fingerprint = update.system_fingerprint
        return self._preamble()

    def _text(self, update: TextUpdate) -> list[Event]:
        try:
            if not update.text.isascii():
                update.text.encode("utf-8")
        except UnicodeEncodeError as exc:
            self.closed = True
            raise StreamInputError(f"invalid UTF-8 in backend text: {exc.reason} at offset {exc.start}") from None
        if update.token_count < 0:
            self.closed = True
            raise StreamInputError(f"invalid token count {update.token_count}")
        if self._fast_text and update.text:
            plain = self._plain_run(update.text, update.token_count)
            if plain is not None:
                return plain
        self.usage.completion_tokens += update.token_count
        if self._started:
            return self._pieces(self.parser.feed_text(update.text))
        events = self._preamble()
        return events + self._pieces(self.parser.feed_text(update.text))

    def _tokens(self, update: TokenUpdate) -> list[Event]:
        ids = update.token_ids if isinstance(update.token_ids, list) else list(update.token_ids)
        decoder = self._decoder
        if decoder is not None and update.logprobs is None and len(ids) == 1 and self._started and self.fast_paths:
            # fast path: one plain token, no logprobs (what an engine streams)
            tid = ids[0]
            if tid not in self._special_ids and isinstance(tid, int):
                parser = self.parser
                if not parser._token_markers:
                    parser.use_token_markers()
                try:
                    text = decoder.add_one(tid)
                except ValueError as exc:
                    self.closed = True
                    raise StreamInputError(f"cannot decode token ids: {exc}") from None
                self.usage.completion_tokens += 1
                if not text:
                    return []
                return self._pieces(parser.feed_text(text))
        if self._decoder is None or self._logprobs is None:
            self.closed = True
            raise StreamInputError("token update received without a tokenizer")
        if update.logprobs is not None and len(update.logprobs) != len(ids):
            self.closed = True
            raise StreamInputError(
                f"invalid log probabilities: {len(update.logprobs)} log probabilities for {len(ids)} token IDs"
            )
        try:
            self.parser.use_token_markers()
            marker_ids = self._marker_ids if self.parser.token_markers else {}
            segments = []
            for start, end in _special_runs(ids, self._special_ids):
                run = ids[start:end]
                text = self._decoder.add_many(run)
                if end - start == 1 and run[0] in marker_ids:
                    text = marker_ids[run[0]]
                if update.logprobs is not None:
                    self._held_logprobs.extend(self._logprobs.entries(run, list(update.logprobs)[start:end]))
                entries = None
                if text and self._held_logprobs:
                    entries = tuple(self._held_logprobs)
                    self._held_logprobs = []
                segments.append((text, entries, end - start))
        except (ValueError, OverflowError, TypeError) as exc:
            self.closed = True
            raise StreamInputError(f"cannot decode token ids: {exc}") from None
        events = self._preamble()
        pieces: list[Piece] = []
        parser = self.parser
        for text, entries, count in segments:
            # tokens count up to the segment where a stop sequence ends the output (as the reference counts)
            self.usage.completion_tokens += count
            if text:
                pieces += parser.feed_segments([(text, entries)])
                if parser.stop_sequence is not None:
                    break
        return events + self._pieces(pieces)

    def _plain_run(self, text: str, count: int) -> list[Event] | None:
        """The per-token hot path, in one step: a run of output text that stood for `count` tokens (one
        plain token's whole text, or a text update's), in a state where that text alone decides the
        outcome (nothing held or pending; answer or reasoning without a marker character in `text`,
        JSON mode's answer or prose decided by `text`; the tool-call block; after the output's end).
        Gives exactly the events of the general path, or None when that path must decide. It reads
        the parser's state directly to stay one call deep."""
        parser = self.parser
        if not self._started:
            return None
        mode = parser._mode
        if mode > _CONTENT:
            return self._plain_run_after_text(mode, text, count)
        if parser._pending or parser._strip_leading:
            return None
        json = parser._json
        spec = parser._fast.get(mode if json is None else mode + 8 * (json._state + 1))
        if (
            spec is None
            or spec[0].search(text) is not None
            or (spec[1] is not None and not spec[1].isdisjoint(text))
            or (spec[2] and text[-1] == "\n")
        ):
            return None
        out_text = text
        if json is not None and mode == _CONTENT:
            run = json.whole_run(text)
            if run is None:
                return None
            out_text = run
        parser._tail = _extend_tail(parser._tail, text)
        if not out_text.isascii() and parser._token_markers:
            out_text = unmask(out_text)
        self.usage.completion_tokens += count
        is_reasoning = mode == _REASONING
        if is_reasoning:
            parser.reasoning_text.append(out_text)
        chat = self._chat
        if chat is not None:
            return [chat.text_event(is_reasoning, out_text)]
        if self._messages is not None:
            return self._messages.text_event(is_reasoning, out_text)
        assert self._responses is not None
        return self._responses.text_event(is_reasoning, out_text)

    def _plain_run_after_text(self, mode: int, text: str, count: int) -> list[Event] | None:
        """`_plain_run` inside the tool-call block (the text goes to its parser as it is) or after the
        output's end (the text is dropped, the token still counts)."""
        parser = self.parser
        if mode == _TOOLS:
            tools = parser._tools
            assert tools is not None
            self.usage.completion_tokens += count
            if type(tools) is DsmlToolCallParser:
                released = tools.feed_whole(text)
                if released is not None:  # all of `text` is the stage's other text
                    if not released:
                        return []
                    if self._chat is not None:
                        return [self._chat.arguments_event(tools._calls - 1, released)]
                    if self._messages is not None:
                        return [self._messages.arguments_event(released)]
                    assert self._responses is not None
                    return self._responses.arguments_events(released)
            pieces = tools.feed(text)
            if tools.done:
                parser._mode = _DONE
            return self._pieces(pieces) if pieces else []
        if parser.stop_sequence is not None:
            return None
        self.usage.completion_tokens += count
        return []

    def _pieces(self, pieces: list[Piece]) -> list[Event]:
        events: list[Event] = []
        chat = self._chat
        for piece in pieces:
            if type(piece) is ToolCallStart:
                self._has_calls = True
            if chat is not None:
                events.append(chat.piece(piece))
            elif self._messages is not None:
                events += self._messages.piece(piece)
            else:
                assert self._responses is not None
                events += self._responses.piece(piece)
        if self.parser.stop_sequence is not None and not self.finished:
            events += self._complete("stop", explicit=False)
        return events

    def _finish(self, reason: str, explicit: bool) -> list[Event]:
        events = self._preamble()
        if self._decoder is not None:
            tail = self._decoder.finish()
            if tail:
                events += self._pieces(self.parser.feed(tail))
        if self.finished:
            return events
        events += self._pieces(self.parser.finish())
        if self.finished:
            return events
        return events + self._complete(reason, explicit)

    def _complete(self, reason: str, explicit: bool) -> list[Event]:
        self.finished = True
        if self.thinking and self.tokenizer is not None:
            reasoning = "".join(self.parser.reasoning_text)
            self.usage.reasoning_tokens = count_ids(self.tokenizer, reasoning)
        stop_seq = self.parser.stop_sequence
        calls = self._has_calls and explicit
        if self._chat is not None:
            return self._chat.finish(chat_finish_reason(reason, calls), self.usage, done=self._emit_done)
        if self._messages is not None:
            return self._messages.finish(messages_stop_reason(reason, calls, stop_seq), stop_seq, self.usage)
        assert self._responses is not None
        return self._responses.finish(reason, self.usage)


_SENTINELS: weakref.WeakKeyDictionary[Any, dict[int, str]] = weakref.WeakKeyDictionary()


def _special_sentinels(tokenizer: Any) -> dict[int, str]:
    """Special token id -> its sentinel character (recipe.stream.token_markers), once per tokenizer."""
    if tokenizer is None:
        return {}
    try:
        table = _SENTINELS.get(tokenizer)
    except TypeError:
        table = None
    if table is None:
        special = frozenset(getattr(tokenizer, "special_ids", ()) or ())
        added = getattr(tokenizer, "added_ids", {}) or {}
        pairs = [(spelling, tid) for spelling, tid in added.items() if tid in special]
        table = dict(zip((tid for _, tid in pairs), sentinels_for([spelling for spelling, _ in pairs]), strict=True))
        with contextlib.suppress(TypeError):
            _SENTINELS[tokenizer] = table
    return table


def _special_runs(ids: list[int], special: frozenset[int]) -> list[tuple[int, int]]:
    """Split `ids` into runs: each special token alone, plain tokens grouped (the reference's segments)."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i, tid in enumerate(ids):
        if tid in special:
            if i > start:
                runs.append((start, i))
            runs.append((i, i + 1))
            start = i + 1
    if start < len(ids):
        runs.append((start, len(ids)))
    return runs
