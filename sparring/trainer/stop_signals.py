"""Stopping a training run cleanly on SIGINT (Ctrl-C) or SIGTERM.

`StopSignals` replaces the two signals' handlers while a run trains: the first
one only records which signal came (`signum`) and wakes the run, which
cancels the episodes in flight (`cancelling`: a rollout or evaluation
raced against the signal), lets an optimizer step or checkpoint that has
begun finish (cancelling one halfway would leave live weights a step ahead of
the step logged), stops at the next step boundary (`check`), checkpoints the
last completed step, and exits `128 + signum` (130, 143). A second signal
quits at once (`os._exit`), for a run that cannot stop in time.

Nothing is raised inside the code a signal lands in (Python's default SIGINT
handler raises KeyboardInterrupt wherever the main thread is, which left
asyncio tasks with half-run coroutines and tracebacks); the run decides where
to stop. The handlers are plain `signal.signal` ones, not the event loop's:
they run even while the loop is blocked (loading a model), so a second signal
quits then too, and they wake the loop with `call_soon_threadsafe`. Python
runs signal handlers in the main thread only, so `install` works only there;
elsewhere it says False and a KeyboardInterrupt or cancellation still stops
the run with a checkpoint, without these guarantees.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable
from typing import TypeVar

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a run with a checkpoint."""

T = TypeVar("T")


class Stopped(Exception):
    """A stop signal came: the run ends at the last completed step."""


class StopSignals:
    """While installed, SIGINT and SIGTERM ask the run to stop; a second one of them quits the process at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        """The first stop signal received; None while none came."""
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> bool:
        """Take over SIGINT and SIGTERM for the running loop; False (nothing installed) off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._receive)
        return True

    def restore(self) -> None:
        """Put the handlers from before `install` back."""
        for signum, previous in self._previous.items():
            signal.signal(
                signum, previous if previous is not None else signal.SIG_DFL
            )  # None: set from C, not restorable
        self._previous.clear()
        self._loop = None

    def check(self) -> None:
        """At a step boundary: raise Stopped once a stop signal came."""
        if self.requested:
            raise Stopped(signal.Signals(self.signum).name)

    async def cancelling(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`; a stop signal meanwhile cancels it (waiting for it to unwind) and raises Stopped."""
        if self.requested:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started: no "never awaited" warning
            self.check()
        task = asyncio.ensure_future(awaitable)
        woken = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, woken}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            woken.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise Stopped(signal.Signals(self.signum).name)

    def _receive(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(
                f"{name} again: quitting at once, without a checkpoint of the step in flight",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signum)
        self.signum = signum
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._event.set)
        log.warning(
            "%s: cancelling the episodes in flight and saving a checkpoint of the last completed step (%s "
            "again quits at once)",
            name,
            name,
        )
