"""How `sparring serve` stops: drain in-flight work for a bounded time, then exit.

On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and waits for
open requests; `serve_until_stopped` bounds that wait by the app's
`DrainClock` (`ServerLimits.drain_s`, `serve --drain-s`), the app's
shutdown then lets running Tinker futures finish until the same deadline and
cancels the rest (a sampling request stops at its next decode step), and the
process exits. Whatever still holds it past the deadline plus
`HARD_EXIT_GRACE_S` (an operation that cannot be interrupted, such as one
long forward pass) is cut short: the process exits anyway, with status 1.
While it serves, a connection that sends a request's headers or body too
slowly is closed (`read_timeouts.py`, `serve --header-timeout-s/--body-timeout-s`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass

from .limits import ServerLimits
from .read_timeouts import ReadTimeouts, read_timeout_protocol

logger = logging.getLogger(__name__)

HARD_EXIT_GRACE_S = 10.0
"""How long past the drain deadline the process may still take before it is ended without waiting."""


@dataclass
class DrainClock:
    """When a stopping server's drain ends."""

    drain_s: float
    """How long in-flight work may go on once the server is told to stop."""
    deadline: float | None = None
    """Monotonic time the drain ends; None while the server runs."""

    def begin(self) -> None:
        if self.deadline is None:
            self.deadline = time.monotonic() + self.drain_s

    def remaining(self) -> float:
        """Seconds left to drain (starting the clock if nobody has yet)."""
        self.begin()
        return max(self.deadline - time.monotonic(), 0.0)


def uvicorn_config(app, host: str, port: int, drain_s: float, timeouts: ReadTimeouts):
    """How `sparring serve` runs uvicorn: h11, closing connections that send requests too slowly (`read_timeouts`)."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=max(drain_s, 0.1),
        http=read_timeout_protocol(timeouts),
    )


def serve_until_stopped(app, host: str, port: int, clock: DrainClock, timeouts: ReadTimeouts | None = None) -> None:
    """Serve `app` with uvicorn until SIGTERM/SIGINT, then drain for `clock.drain_s` and return (or exit hard);
    `timeouts` bound how long a client may take to send a request (the `ServerLimits` defaults without it)."""
    import uvicorn

    if timeouts is None:
        defaults = ServerLimits()
        timeouts = ReadTimeouts(header_s=defaults.header_timeout_s, body_s=defaults.body_timeout_s)

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            if not self.should_exit:
                clock.begin()
                logger.warning("stopping: in-flight requests get %.0f s to finish", clock.drain_s)
                watchdog = threading.Timer(
                    clock.drain_s + HARD_EXIT_GRACE_S, _exit_now, (clock.drain_s + HARD_EXIT_GRACE_S,)
                )
                watchdog.daemon = True
                watchdog.start()
            super().handle_exit(sig, frame)

    DrainingServer(uvicorn_config(app, host, port, clock.drain_s, timeouts)).run()


def _exit_now(after_s: float) -> None:
    print(
        f"sparring serve: still busy {after_s:.0f} s after being told to stop; exiting without waiting",
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)
