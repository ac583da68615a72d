"""The loop interrupter: another thread makes the main thread raise, inside the Python code it is running.

The loop watchdog (`loop_watchdog.py`) sees, from its own thread, an episode
that blocks the event loop; to end that episode it must stop the blocking
code where it runs, in the loop's thread. `MainThreadInterrupter` does it
with a signal: `interrupt(decide)` sends `INTERRUPT_SIGNAL` to the main
thread (`signal.pthread_kill`), and the handler, which CPython runs in the
main thread at its next bytecode boundary, calls `decide(frame)` there with
the frame it stopped and raises what `decide` returns (nothing when the
moment has passed). A blocking system call (`time.sleep`, a socket read, a
lock acquire) fails with EINTR, CPython runs the handler and the call raises;
a pure-Python loop raises at its next iteration. One long call inside C
(a big regex, a torch op) runs to its end first: nothing can be raised inside it.

`INTERRUPT_SIGNAL` is SIGURG, whose default action is to ignore it (Go's
runtime preempts goroutines with it for the same reason): one that arrives
after the handler is gone does nothing. The handler is installed only while
episodes play (`install` / `restore`, the previous handler put back), and a
SIGURG that is not ours goes on to the previous handler. Python runs signal
handlers in the main thread only, so this works only for an event loop
running in the main thread, and only where `pthread_kill` exists (not on
Windows); `install` says False otherwise and nothing is interrupted.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

INTERRUPT_SIGNAL: int | None = getattr(signal, "SIGURG", None)
"""The signal the interrupter sends: one whose default action is to ignore it."""

Decision = Callable[[FrameType | None], BaseException | None]
"""`decide(frame)`: run in the main thread at the interrupted `frame`; the exception to raise there, or None."""


class MainThreadInterrupter:
    """While installed, `interrupt(decide)` raises `decide(frame)`'s exception in the main thread where it runs."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: the handler may run while the main thread holds it
        self._pending: Decision | None = None
        self._previous: Callable | int = signal.SIG_DFL
        self._installed = False

    @staticmethod
    def possible() -> bool:
        """Whether the current thread can install the handler: the main thread, on a platform with pthread_kill."""
        return (
            INTERRUPT_SIGNAL is not None
            and hasattr(signal, "pthread_kill")
            and threading.current_thread() is threading.main_thread()
        )

    def install(self) -> bool:
        """Install the handler (from the main thread); False, and nothing installed, where that is not possible."""
        if not self.possible():
            return False
        with self._lock:
            previous = signal.signal(INTERRUPT_SIGNAL, self._handle)
            self._previous = (
                signal.SIG_DFL if previous is None else previous
            )  # None: a handler set from C, not restorable
            self._installed = True
        return True

    def restore(self) -> None:
        """Put the previous handler back; no interruption is sent after this returns."""
        with self._lock:
            if not self._installed:
                return
            self._installed, self._pending = False, None
            if signal.getsignal(INTERRUPT_SIGNAL) == self._handle:  # unless someone replaced ours meanwhile
                signal.signal(INTERRUPT_SIGNAL, self._previous)

    def interrupt(self, decide: Decision) -> bool:
        """From any thread: have the main thread run `decide` at its next bytecode and raise what it returns; False
        when not installed."""
        with self._lock:
            if not self._installed:
                return False
            self._pending = decide
            signal.pthread_kill(threading.main_thread().ident, INTERRUPT_SIGNAL)
            return True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        with self._lock:
            decide, self._pending = self._pending, None
        if decide is None:
            if callable(self._previous):
                self._previous(signum, frame)
            return
        error = decide(frame)
        if error is not None:
            raise error
