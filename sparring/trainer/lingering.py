"""Threads left running: what a workflow started and never ended must not keep the process alive after training.

Python waits for every non-daemon thread before a process exits, so one thread a workflow started and left
running (a server, a poller, an `Event().wait()`) would keep `sparring train` alive after its run finished.
`lingering_threads` names them; the command line reports them and exits without waiting (`sparring.cli.main`),
and `run_training` warns about them when it returns.
"""

from __future__ import annotations

import threading


def lingering_threads() -> list[str]:
    """The names of the live non-daemon threads besides the main one: those the interpreter would wait for at exit."""
    main = threading.main_thread()
    return sorted(
        thread.name
        for thread in threading.enumerate()
        if thread is not main and thread.is_alive() and not thread.daemon
    )


def lingering_warning(threads: list[str]) -> str:
    return f"{len(threads)} thread(s) left running (started by the workflow?), not waited for: {', '.join(threads)}"
