"""The thread probe: is a late event loop held up by code, or by a machine with no CPU to give it?

The loop watchdog (`loop_watchdog.py`) sees the loop's heartbeat come late.
That has two causes that call for opposite answers: code on the loop's
thread that does not yield (a `time.sleep`, a synchronous call, a long
computation: name it, take its time off the other episodes, interrupt it
once past its time), or a machine so loaded that the loop's thread, ready
to run, gets little CPU (nobody's fault: blaming the line it happens to be
on is a false alarm). `ThreadProbe` tells them apart from another thread by
what the kernel says of the loop's thread: asleep in a blocking call
(state S or D) is code blocking; running on a CPU it got (its CPU time
grew by `busy_s` since the heartbeat) is code not yielding; runnable with
little CPU time is starvation. Where the kernel cannot be asked (no
`/proc`, no per-thread CPU clock), every late heartbeat counts as code.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path


class ThreadProbe:
    """CPU time and run state of the thread that created it, read from any thread."""

    def __init__(self) -> None:
        self._clock = time.pthread_getcpuclockid(threading.get_ident()) if hasattr(time, "pthread_getcpuclockid") else None
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
        """The kernel's run state of the thread ('R' running or runnable, 'S'/'D' asleep in a call, ...); None if unknown."""
        try:
            stat = self._stat.read_text()
        except OSError:
            return None
        return stat[stat.rindex(")") + 2 :].split(" ", 1)[0]  # the state follows the parenthesised command name

    def held_up_by_code(self, cpu_at_mark: float, busy_s: float) -> bool:
        """Whether the thread, late since it read `cpu_at_mark` (its own `time.thread_time()`), is kept by code:
        asleep in a blocking call, or `busy_s` of CPU used since. False when it is ready but starved of CPU."""
        state, cpu = self.state(), self.cpu_time()
        if state is None or cpu is None:
            return True
        return state in ("S", "D") or cpu - cpu_at_mark >= busy_s
