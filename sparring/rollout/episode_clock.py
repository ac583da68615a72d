"""Episode clocks: an episode's timeout counts its own time, not the time others take.

The episodes of a step run concurrently in one event loop and share one
sampler, so the wall time since an episode started is not its own: most of
it may be spent queued behind the other episodes' model calls, or waiting
while another episode blocks the event loop. `EpisodeClock.own_time()`
counts

- the time the episode runs, or waits on anything but the shared sampler, in full;
- the time it waits on the shared sampler (a local engine or a Tinker-protocol
  service; `sampler_wait()` marks it) divided by the number of episodes
  waiting on it at that moment: its fair share. A crowded sampler does not
  time every episode out, and an episode that calls the model in an endless
  loop still runs out of time;
- not at all the time the event loop was blocked by another episode
  (`SharedTime.begin_stall` / `end_stall`, reported by the loop watchdog).
  Every clock stands still from the moment the stall began until the
  watchdog ends it (only the blocking episode's runs on), so an episode
  that the loop resumes right after the stall, before the watchdog has
  had its turn, is not charged for it either.

`SharedTime` is the account behind the clocks of the episodes of one event
loop (the loop watchdog holds it). The running episode's clock is found in a context variable,
like its recorder, and every asyncio task created under it is adopted by it
(`adopt_new_tasks` installs the task factory that does so): the watchdog
names the episode behind a blocking task (and interrupts it once past its
`interrupt_after_s`), and an episode that ignores its cancellation can be
ended whole (`EpisodeClock.abandon`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
import weakref

_CURRENT: contextvars.ContextVar[EpisodeClock | None] = contextvars.ContextVar("sparring_episode_clock", default=None)
_TASK_CLOCKS: weakref.WeakKeyDictionary[asyncio.Task, EpisodeClock] = weakref.WeakKeyDictionary()


class SharedTime:
    """The time account shared by the episodes of one event loop: sampler waits shared out, loop stalls taken off."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stalled = 0.0
        self._stall_from: float | None = None
        self._culprit: EpisodeClock | None = None
        self._share = 0.0
        self._waiting = 0
        self._updated = time.monotonic()

    def _running(self, now: float) -> float:
        if self._stall_from is not None:
            now = min(now, self._stall_from)
        return now - self._stalled

    def _advance(self, now: float) -> None:
        running = self._running(now)
        # The scale only moves forward (a stall begun after the fact may put `running` back a little).
        if self._waiting and running > self._updated:
            self._share += (running - self._updated) / self._waiting
        self._updated = max(self._updated, running)

    def running_time(self, now: float) -> float:
        """A running episode's time scale: wall time less every event-loop stall, the one going on included."""
        with self._lock:
            return self._running(now)

    def share_time(self, now: float) -> float:
        """A waiting episode's time scale: advances at 1 / (episodes waiting on the sampler), not during stalls."""
        with self._lock:
            self._advance(now)
            return self._share

    def start_wait(self, now: float) -> float:
        with self._lock:
            self._advance(now)
            self._waiting += 1
            return self._share

    def end_wait(self, now: float) -> float:
        with self._lock:
            self._advance(now)
            self._waiting -= 1
            return self._share

    def begin_stall(self, since: float, culprit: EpisodeClock | None) -> None:
        """The event loop has been blocked since `since` (by `culprit`'s code, if an episode's): every clock stops
        there."""
        with self._lock:
            if self._stall_from is None:
                self._advance(since)
                self._stall_from, self._culprit = since, culprit

    def end_stall(self, now: float) -> tuple[float, EpisodeClock | None]:
        """The loop turns again: (seconds it was blocked, the episode that blocked it); the clocks go on from here."""
        with self._lock:
            if self._stall_from is None:
                return 0.0, None
            seconds, culprit = max(0.0, now - self._stall_from), self._culprit
            self._stalled += seconds
            self._stall_from, self._culprit = None, None
            return seconds, culprit

    def stall_charged_to(self, clock: EpisodeClock, now: float) -> float:
        """Seconds of the stall going on that `clock`'s episode is causing (0 when it is not the culprit)."""
        with self._lock:
            if self._stall_from is None or self._culprit is not clock:
                return 0.0
            return max(0.0, now - self._stall_from)


class EpisodeClock:
    """One episode's own time, and the asyncio tasks it runs."""

    def __init__(self, label: str, shared: SharedTime, interrupt_after_s: float | None = None) -> None:
        self.label = label
        """Names the episode in reports (its task id)."""
        self.interrupt_after_s = interrupt_after_s
        """Own time past which code of the episode that blocks the event loop is interrupted (loop watchdog); None:
        never."""
        self.blocked_at: str | None = None
        """Where the episode last blocked the event loop (file:line in function), if it did."""
        self.interrupted_at: str | None = None
        """Where the loop watchdog interrupted the episode's blocking code, if it did: the episode is over."""
        self._shared = shared
        self._own = 0.0
        self._waits = 0
        self._mark = shared.running_time(time.monotonic())
        self._tasks: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()

    def own_time(self) -> float:
        """Seconds of the episode's own time so far."""
        now = time.monotonic()
        scale = self._shared.share_time(now) if self._waits else self._shared.running_time(now)
        return self._own + scale - self._mark + self._shared.stall_charged_to(self, now)

    @contextlib.contextmanager
    def waiting_for_sampler(self):
        """While inside, the episode is charged its fair share of the wait (nested and concurrent waits count once)."""
        if self._waits == 0:
            now = time.monotonic()
            self._own += self._shared.running_time(now) - self._mark
            self._mark = self._shared.start_wait(now)
        self._waits += 1
        try:
            yield
        finally:
            self._waits -= 1
            if self._waits == 0:
                now = time.monotonic()
                self._own += self._shared.end_wait(now) - self._mark
                self._mark = self._shared.running_time(now)

    def charge_stall(self, seconds: float, where: str | None) -> None:
        """This episode blocked the event loop for `seconds` (at `where`): its own time, though taken off the
        others' (`SharedTime.end_stall`)."""
        self._own += seconds
        self.blocked_at = where or self.blocked_at

    def adopt(self, task: asyncio.Task) -> None:
        """Count `task` as part of this episode."""
        _TASK_CLOCKS[task] = self
        self._tasks.add(task)

    def abandon(self) -> None:
        """End every unfinished task of the episode: close its coroutine (so no cancellation can be caught) and
        cancel it."""
        for task in list(self._tasks):
            if task.done():
                _retrieve(task)
                continue
            with contextlib.suppress(RuntimeError):  # a coroutine that awaits in its `finally` cannot be closed cleanly
                task.get_coro().close()
            task.cancel()
            task.add_done_callback(
                _retrieve
            )  # its closed coroutine ends it with "cannot reuse already awaited coroutine"

    @contextlib.contextmanager
    def current(self):
        """Make this the current episode's clock for the code (and the tasks it creates) inside the block."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


def _retrieve(task: asyncio.Task) -> None:
    """Read a finished task's error: an abandoned episode's errors end with it, as its timeout, unlogged by asyncio."""
    if not task.cancelled():
        task.exception()


def clock_of(task: asyncio.Task | None) -> EpisodeClock | None:
    """The clock of the episode that `task` belongs to, if any."""
    return None if task is None else _TASK_CLOCKS.get(task)


@contextlib.contextmanager
def sampler_wait():
    """Mark a wait on the shared sampler in the current episode (a no-op outside episodes)."""
    clock = _CURRENT.get()
    if clock is None:
        yield
        return
    with clock.waiting_for_sampler():
        yield


def _adopting_task_factory(loop: asyncio.AbstractEventLoop, coro, **options) -> asyncio.Task:
    task = asyncio.Task(coro, loop=loop, **options)
    context = options.get("context")
    clock = context.get(_CURRENT) if context is not None else _CURRENT.get()
    if clock is not None:
        clock.adopt(task)
    return task


def adopt_new_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Have tasks created inside an episode adopted by its clock (unless the loop already has a task factory of its
    own)."""
    if loop.get_task_factory() is None:
        loop.set_task_factory(_adopting_task_factory)
