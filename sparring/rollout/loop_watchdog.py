"""The loop watchdog: an episode that blocks the event loop is named, and the others are not charged for it.

Episodes run as tasks of one event loop (their model calls then reach the
sampler in a deterministic order, so a seeded run samples the same tokens
again). A workflow that blocks the loop (`time.sleep`, a synchronous HTTP
call, a long computation) stalls every episode. That cannot be undone from
outside, but it must not pass silently, nor time the others out:
`LoopWatchdog` keeps a heartbeat on the loop (a callback every `BEAT_S`)
and a thread that looks at it. When the heartbeat is `BLOCK_REPORT_S`
late, the thread looks at which task is running and where (its innermost
frame) and logs a warning naming the episode; when the loop turns again,
the length of the stall is taken off every episode's clock but the
blocking one's (`SharedTime.add_stall`; the watchdog holds the loop's
`SharedTime`, which the clocks of its episodes count on). The blocking episode's own time
keeps counting, so it is cancelled at its next `await` once past its timeout.

One watchdog runs per event loop while it plays episodes (`watching`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import weakref
from dataclasses import dataclass

from .episode_clock import EpisodeClock, SharedTime, clock_of

log = logging.getLogger(__name__)

BEAT_S = 0.1
"""Heartbeat period of the loop, and how often the watchdog looks at it."""
BLOCK_REPORT_S = 0.5
"""A heartbeat this late means the loop is blocked: reported, and taken off the other episodes' clocks."""


@dataclass
class _Stall:
    clock: EpisodeClock | None
    """The episode whose task was running when the stall was seen; None when it was no episode's."""
    where: str | None
    """Innermost frame of the loop's thread then: 'file:line in function'."""


class LoopWatchdog:
    """Heartbeat on one event loop plus the thread that notices when it stops."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.shared_time = SharedTime()
        """The time account of the episodes this loop plays."""
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._users = 0
        self._last_beat = time.monotonic()
        self._stall: _Stall | None = None
        self._beat_handle: asyncio.TimerHandle | None = None
        self._stop: threading.Event | None = None

    def enter(self) -> None:
        self._users += 1
        if self._users == 1:
            self._last_beat, self._stall = time.monotonic(), None
            self._beat_handle = self.loop.call_later(BEAT_S, self._beat)
            self._stop = threading.Event()
            threading.Thread(target=self._watch, args=(self._stop,), name="sparring-loop-watchdog", daemon=True).start()

    def leave(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._stop.set()
            self._beat_handle.cancel()

    def _beat(self) -> None:
        now = time.monotonic()
        with self._lock:
            stall, self._stall = self._stall, None
            late = now - self._last_beat - BEAT_S
            self._last_beat = now
        if stall is not None and late > 0:
            self.shared_time.add_stall(late)
            if stall.clock is not None:
                stall.clock.charge_stall(late, stall.where)
            log.info("the event loop was blocked for %.1fs%s; the other episodes were not charged for it", late, _culprit(stall))
        self._beat_handle = self.loop.call_later(BEAT_S, self._beat)

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(BEAT_S):
            with self._lock:
                if self._stall is not None or time.monotonic() - self._last_beat - BEAT_S < BLOCK_REPORT_S:
                    continue
                self._stall = _Stall(clock_of(asyncio.current_task(self.loop)), _innermost_frame(self._loop_thread))
                stall = self._stall
            log.warning(
                "the event loop is blocked%s: every other episode waits. Await instead of blocking "
                "(asyncio.sleep, an async client, or `await asyncio.to_thread(...)` for blocking code)",
                _culprit(stall),
            )


def _culprit(stall: _Stall) -> str:
    who = f" by the episode of task {stall.clock.label}" if stall.clock is not None else ""
    return who + (f" at {stall.where}" if stall.where else "")


def _innermost_frame(thread_id: int) -> str | None:
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return None
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


_WATCHDOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatchdog] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def watching(loop: asyncio.AbstractEventLoop):
    """Keep the loop's watchdog running while inside (one per loop, shared by the episodes it plays)."""
    watchdog = _WATCHDOGS.get(loop)
    if watchdog is None:
        watchdog = _WATCHDOGS[loop] = LoopWatchdog(loop)
    watchdog.enter()
    try:
        yield watchdog
    finally:
        watchdog.leave()
