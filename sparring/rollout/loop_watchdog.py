"""The loop watchdog: an episode that blocks the event loop is named, not charged to the others, and ended at its time.

Episodes run as tasks of one event loop (their model calls then reach the
sampler in a deterministic order, so a seeded run samples the same tokens
again). A workflow that blocks the loop (`time.sleep`, a synchronous HTTP
call, a long computation) stalls every episode. It must not pass silently,
nor time the others out, nor hold the step past its own timeout:
`LoopWatchdog` keeps a heartbeat on the loop (a callback every `BEAT_S`)
and a thread that looks at it. When the heartbeat is `BLOCK_REPORT_S`
late, the thread first asks the kernel whether code holds the loop's thread
(`ThreadProbe`: asleep in a blocking call, or running on the CPU it got)
or the machine starves it (ready to run, little CPU): only code is blamed;
starvation is logged at info and charged to every episode alike, as any
slowness of the machine is. Code is named: the thread looks at which task
is running and where (its innermost frame) and logs a warning naming the
episode, and from the heartbeat that did not come every episode's clock
stands still but the blocking one's (`SharedTime.begin_stall`; the
watchdog holds the loop's `SharedTime`, which the clocks of its episodes
count on) until the loop turns again and the heartbeat ends the stall
(`SharedTime.end_stall`, the blocking episode charged its length). The
blocking episode's own time keeps counting: once it passes the episode's
`EpisodeClock.interrupt_after_s` (its timeout + the cancellation grace)
while the episode still blocks the loop, the thread interrupts the loop's
thread (`loop_interrupt.py`) and `EpisodeInterrupted` is raised inside the
blocking code, but only if, when the loop's thread gets to it, the same
task still runs the code seen blocking and the loop has not turned since
(otherwise nothing happens, and the next look tries again). The episode then
ends as a timeout naming the blocked line (`player.py`). That needs the loop
in the main thread on a platform with `pthread_kill`; elsewhere the
blocking episode is named and taken off the others' clocks, and it ends
at its next `await` once past its timeout. A long single call inside C
cannot be interrupted: it runs to its end.

One watchdog runs per event loop while it plays episodes (`watching`); the
signal handler is installed only meanwhile.
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
from types import FrameType

from .episode_clock import EpisodeClock, SharedTime, clock_of
from .loop_interrupt import MainThreadInterrupter
from .thread_probe import ThreadProbe

log = logging.getLogger(__name__)

BEAT_S = 0.1
"""Heartbeat period of the loop, and how often the watchdog looks at it."""
BLOCK_REPORT_S = 0.5
"""A heartbeat this late, with code holding the loop's thread, means the loop is blocked: reported, and taken off the
other episodes' clocks. Code holds it when it sleeps in a blocking call or has used this much CPU since the
heartbeat."""


class EpisodeInterrupted(BaseException):
    """Raised inside an episode's code that blocked the event loop past its time; a BaseException (like
    asyncio.CancelledError) so that a workflow's `except Exception` does not swallow it."""


@dataclass
class _Stall:
    clock: EpisodeClock | None
    """The episode whose task was running when the stall was seen; None when it was no episode's."""
    where: str | None
    """Innermost frame of the loop's thread then: 'file:line in function'."""
    interrupting: bool = False
    """Whether an interruption was sent during this stall (it is logged once)."""


class LoopWatchdog:
    """Heartbeat on one event loop plus the thread that notices when it stops."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.shared_time = SharedTime()
        """The time account of the episodes this loop plays."""
        self._loop_thread = threading.get_ident()
        self._probe = ThreadProbe()
        self._lock = threading.Lock()
        self._users = 0
        self._last_beat = time.monotonic()
        self._cpu_at_beat = time.thread_time()
        self._beats = 0
        self._starved_beat = -1
        self._interrupter = MainThreadInterrupter()
        self._stall: _Stall | None = None
        self._beat_handle: asyncio.TimerHandle | None = None
        self._stop: threading.Event | None = None

    def enter(self) -> None:
        self._users += 1
        if self._users == 1:
            self._last_beat, self._cpu_at_beat, self._stall = time.monotonic(), time.thread_time(), None
            self._beat_handle = self.loop.call_later(BEAT_S, self._beat)
            self._stop = threading.Event()
            self._interrupter.install()
            threading.Thread(target=self._watch, args=(self._stop,), name="sparring-loop-watchdog", daemon=True).start()

    def leave(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._stop.set()
            self._interrupter.restore()
            self._beat_handle.cancel()
            self._end_stall(time.monotonic())

    def _beat(self) -> None:
        self._end_stall(time.monotonic())
        self._beat_handle = self.loop.call_later(BEAT_S, self._beat)

    def _end_stall(self, now: float) -> None:
        with self._lock:
            stall, self._stall = self._stall, None
            self._last_beat, self._cpu_at_beat = now, time.thread_time()
            self._beats += 1
        if stall is not None:
            self._charge(stall, now)

    def _charge(self, stall: _Stall, now: float) -> None:
        seconds, culprit = self.shared_time.end_stall(now)
        if culprit is not None:
            culprit.charge_stall(seconds, stall.where)
        log.info(
            "the event loop was blocked for %.1fs%s; the other episodes were not charged for it",
            seconds,
            _culprit(stall),
        )

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(BEAT_S):
            with self._lock:
                late = time.monotonic() - self._last_beat - BEAT_S
                if late < BLOCK_REPORT_S:
                    continue
                stall, beats, cpu_at_beat = self._stall, self._beats, self._cpu_at_beat
            # The probe looks for a while: outside the lock, so a heartbeat that comes meanwhile is never caught
            # waiting on it (and read as a loop asleep in a blocking call).
            held = stall is not None or self._probe.held_up_by_code(cpu_at_beat, BLOCK_REPORT_S)
            with self._lock:
                if self._beats != beats:
                    continue  # the loop came back while the probe looked
                now, blocking = time.monotonic(), clock_of(asyncio.current_task(self.loop))
                if not held:
                    starved, self._starved_beat = self._starved_beat != beats, beats
                    stall = seen = None
                elif stall is None or stall.clock is not blocking:
                    # Under the lock, so the heartbeat that ends the stall cannot have run yet. A stall whose
                    # blocking episode changed (one ended, the next blocked before the heartbeat) is split there.
                    if stall is not None:
                        self._charge(stall, now)
                    since = self._last_beat + BEAT_S if stall is None else now
                    stall = seen = self._stall = _Stall(blocking, _where(sys._current_frames().get(self._loop_thread)))
                    self.shared_time.begin_stall(since, blocking)
                    starved = False
                else:
                    starved = seen = None
            if starved:
                log.info(
                    "the event loop is %.1fs late, but no code holds it: its thread is ready and gets "
                    "little CPU (an overloaded machine); no episode is blamed",
                    late,
                )
            if seen:
                log.warning(
                    "the event loop is blocked%s: every other episode waits. Await instead of blocking "
                    "(asyncio.sleep, an async client, or `await asyncio.to_thread(...)` for blocking code)",
                    _culprit(stall),
                )
            if stall is not None:
                self._interrupt_if_overdue(stall, beats)

    def _interrupt_if_overdue(self, stall: _Stall, beats: int) -> None:
        """Interrupt the loop's thread when the task blocking it is an episode's past its `interrupt_after_s`."""
        clock = clock_of(asyncio.current_task(self.loop))
        if clock is None or clock.interrupt_after_s is None or clock.own_time() < clock.interrupt_after_s:
            return
        blocking = sys._current_frames().get(self._loop_thread)
        where = _where(blocking)

        def decide(frame: FrameType | None) -> EpisodeInterrupted | None:
            # In the loop's thread, between two bytecodes. Still the same stall, task and blocking code, or no-op.
            if (
                self._beats != beats
                or clock_of(asyncio.current_task(self.loop)) is not clock
                or not _inside(frame, blocking)
            ):
                return None
            clock.interrupted_at = where
            return EpisodeInterrupted(
                f"the episode blocked the event loop at {where} past {clock.interrupt_after_s:g}s of its own time"
            )

        if self._interrupter.interrupt(decide) and not stall.interrupting:
            stall.interrupting = True
            log.warning(
                "interrupting the episode of task %s: it blocks the event loop at %s past %gs of its own "
                "time (its timeout + grace)",
                clock.label,
                where,
                clock.interrupt_after_s,
            )


def _culprit(stall: _Stall) -> str:
    who = f" by the episode of task {stall.clock.label}" if stall.clock is not None else ""
    return who + (f" at {stall.where}" if stall.where else "")


def _where(frame: FrameType | None) -> str | None:
    """'file:line in function' of `frame`."""
    return None if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _inside(frame: FrameType | None, outer: FrameType | None) -> bool:
    """Whether `frame` is `outer` or runs inside a call made from it."""
    while frame is not None:
        if frame is outer:
            return True
        frame = frame.f_back
    return False


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
