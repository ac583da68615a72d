"""Connections that send their request too slowly are closed: header and body read timeouts for `sparring serve`.

uvicorn closes a connection idle between requests (`timeout_keep_alive`), but one that sends part of a request's
headers, or part of its body, and then stalls (or trickles a byte at a time) holds its socket and its buffers for
ever: a few hundred such clients exhaust the server's file descriptors. `read_timeout_protocol` makes uvicorn's h11
protocol close a connection whose request headers are not complete `header_timeout_s` after the connection opened
(or after the previous response), and one whose request body is not complete `body_timeout_s` after its headers.
The app never sees a closed slow request's headers; one whose body was cut off reads a disconnect.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadTimeouts:
    """How long a client may take to send one request."""

    header_s: float
    """Seconds from the connection opening (or the last response) to the end of the request's headers."""
    body_s: float
    """Seconds from the end of the headers to the end of the request's body."""


def read_timeout_protocol(timeouts: ReadTimeouts) -> type:
    """uvicorn's h11 protocol, closing a connection that sends its request's headers or body too slowly."""
    import h11  # here, not at import: `sparring.server` imports without uvicorn loaded
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ReadTimeoutProtocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _waiting_for: str | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._watch()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def _watch(self) -> None:
            """Start the clock of the part of the request the client now owes, if it changed; stop it once sent."""
            state = self.conn.their_state
            owed = "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
            if owed == self._waiting_for or self.transport.is_closing():
                return
            self._stop()
            self._waiting_for = owed
            if owed is not None:
                seconds = timeouts.header_s if owed == "headers" else timeouts.body_s
                self._timer = self.loop.call_later(seconds, self._expire, owed, seconds)

        def _stop(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._waiting_for = None, None

        def _expire(self, owed: str, seconds: float) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            client = "{}:{:d}".format(*self.client) if self.client else "a client"
            logger.info("closed the connection of %s: its request %s took over %g s", client, owed, seconds)
            self.transport.close()

    return ReadTimeoutProtocol
