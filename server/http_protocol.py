"""uvicorn's h11 connection with the two timers it lacks: request headers must arrive in time, and a
response that the peer stops reading is cut off.

uvicorn arms a timer only between requests on a kept-alive connection, and cancels it on the first byte:
a connection that sends nothing, or its headers a byte at a time (slowloris), or that stops reading a
stream (a vanished peer whose TCP connection is half-open), is otherwise held for ever. A one-second
watchdog per connection closes the first kind after `header_timeout_s` and aborts the second after
`stall_timeout_s` without any progress; the route then sees `http.disconnect` and aborts its engine request.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("recipe.server")

WATCH_INTERVAL_S = 1.0


class GuardedH11Protocol(H11Protocol):
    """H11Protocol plus a header deadline and a write-stall deadline (class attributes, see `guarded_h11`)."""

    header_timeout_s: float = 10.0
    stall_timeout_s: float = 30.0

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting_since: float | None = time.monotonic()
        self._stalled_since: float | None = None
        self._watch = self.loop.call_later(WATCH_INTERVAL_S, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        self._watch.cancel()
        super().connection_lost(exc)

    def _check(self) -> None:
        closing = self.transport.is_closing()
        if closing and not self.flow.write_paused:
            return  # closed, or closing with its last bytes leaving
        now = time.monotonic()
        if closing:
            pass  # close() waits for the buffer to drain: a peer that reads nothing holds it, see below
        elif self.conn.their_state is h11.IDLE:  # waiting for (the rest of) a request's headers
            if self._waiting_since is None:
                self._waiting_since = now
            elif now - self._waiting_since > self.header_timeout_s:
                log.warning("closing a connection from %s: no complete request headers within %.0f s",
                            self.client, self.header_timeout_s)
                self.transport.close()
                return
        else:
            self._waiting_since = None
        if self.flow.write_paused:  # the peer has not taken what was written
            if self._stalled_since is None:
                self._stalled_since = now
            elif now - self._stalled_since > self.stall_timeout_s:
                log.warning("aborting a connection to %s: it read nothing for %.0f s", self.client,
                            self.stall_timeout_s)
                self.transport.abort()  # drops the unsent buffer; connection_lost tells the route
                return
        else:
            self._stalled_since = None
        self._watch = self.loop.call_later(WATCH_INTERVAL_S, self._check)


def guarded_h11(header_timeout_s: float, stall_timeout_s: float) -> type[GuardedH11Protocol]:
    """The protocol class to give `uvicorn.Config(http=...)`."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "stall_timeout_s": stall_timeout_s})
