"""The thread probe: is a late event loop held up by code, or by a machine with no CPU to give it?

The loop watchdog (`loop_watchdog.py`) sees the loop's heartbeat come late.
That has two causes that call for opposite answers: code on the loop's
thread that does not yield (a `time.sleep`, a synchronous call, a long
computation: name it, take its time off the other episodes, interrupt it
once past its time), or a machine so loaded that the loop's thread, ready
to run, gets little CPU (nobody's fault: blaming the line it happens to be
on is a false alarm). `ThreadProbe` tells them apart from another thread by
what the kernel says of the loop's thread: running on a CPU it got (its
CPU time grew by `busy_s` since the heartbeat) is code not yielding; asleep
(state S or D) at each of `STATE_LOOKS` reads is code blocking in a call;
ready to run (R) with little CPU time is starvation. Where the kernel cannot be asked (no
`/proc`, no per-thread CPU clock), every late heartbeat counts as code.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

STATE_LOOKS = 5
"""How often the thread's state is read before it counts as asleep in a call."""
STATE_LOOK_GAP_S = 0.002
"""Pause between two reads of the state (the GIL is let go meanwhile)."""


class ThreadProbe:
    """CPU time and run state of the thread that created it, read from any thread."""

    def __init__(self) -> None:
        self._clock = (
            time.pthread_getcpuclockid(threading.get_ident()) if hasattr(time, "pthread_getcpuclockid") else None
        )
        self._stat = Path(f"/proc/self/task/{threading.get_native_id()}/stat")

    def cpu_time(self) -> float | None:
        """Seconds of CPU the thread has used; None where that cannot be read."""
        if self._clock is None:
            return None
        try:
            return time.clock_gettime(self._clock)
        except OSError:
            return None

    def state(self) -> str | None:
        """The kernel's run state of the thread ('R' running or runnable, 'S'/'D' asleep in a call, ...); None if
        unknown."""
        try:
            stat = self._stat.read_text()
        except OSError:
            return None
        return stat[stat.rindex(")") + 2 :].split(" ", 1)[0]  # the state follows the parenthesised command name

    def held_up_by_code(self, cpu_at_mark: float, busy_s: float) -> bool:
        """Whether the thread, late since it read `cpu_at_mark` (its own `time.thread_time()`), is kept by code:
        `busy_s` of CPU used since, or asleep in a blocking call. False when it is ready but starved of CPU."""
        cpu = self.cpu_time()
        if cpu is None:
            return True
        if cpu - cpu_at_mark >= busy_s:
            return True
        # A thread that runs Python sleeps for a moment whenever it waits for the GIL (this thread holds it while it
        # looks), so only a thread seen asleep at every look, the GIL let go between them, sleeps in a call.
        for _ in range(STATE_LOOKS):
            state = self.state()
            if state is None:
                return True
            if state not in ("S", "D"):
                return False
            time.sleep(STATE_LOOK_GAP_S)
        return True
