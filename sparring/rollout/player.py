"""Episode players: where a workflow runs, and the timeout that holds.

`EpisodePlayer` is the seam between the runner and the place a workflow runs:
`play_in_process` runs it as a task of this event loop, the Ray runner
(`sparring.runners.ray`) on a worker. Either raises
`TimeoutError` once the episode's own time passes its timeout.

`play_in_process` measures that time on the episode's `EpisodeClock` (time
queued for the shared sampler shared out, stalls of the event loop caused by
other episodes left out), under the loop's watchdog (which names an episode
that blocks the loop). Past the timeout the workflow is cancelled; one that
has not stopped `CANCEL_GRACE_S` later (it caught the cancellation and went
on) is abandoned: its tasks are closed, its late result ignored, and it
counts once, as a timeout. One that blocks the event loop cannot be
cancelled (nothing else runs meanwhile): the watchdog interrupts its blocking
code at the same bound, its timeout + `CANCEL_GRACE_S` of its own time
(`loop_watchdog.py`), and it ends the same way, as one timeout naming the
line it blocked at. One that blocks past its timeout but less than the grace and
then returns without an `await` is a timeout too: its result came after its time.

A workflow cannot end the run: `SystemExit` and `KeyboardInterrupt` raised by its code (`sys.exit(3)`, a
`raise KeyboardInterrupt`) would leave an asyncio task through the event loop and stop training, so the workflow's
coroutine runs inside `_contained`, which turns them into `WorkflowExit`, an error episode like any other. A real
Ctrl-C is no exception in workflow code: the trainer takes SIGINT over (`sparring.trainer.safeguards.StopSignals`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .episode_clock import EpisodeClock, adopt_new_tasks
from .loop_watchdog import watching
from .workflow import EpisodeFn, ModelRouter

EpisodePlayer = Callable[[EpisodeFn, dict, ModelRouter, float], Awaitable[Any]]
"""`play(episode_fn, task, tuner, timeout_s) -> output`: runs one episode's workflow inside its recorder; raises
TimeoutError once the episode's own time passes `timeout_s`."""

CANCEL_GRACE_S = 2.0
"""How long a cancelled (timed-out) workflow has to stop before it is abandoned."""


class EpisodeTimeout(asyncio.TimeoutError):
    """The episode ran past its own time; the message says what happened then."""


class WorkflowExit(RuntimeError):
    """The workflow raised SystemExit or KeyboardInterrupt: an error episode, never the end of the run."""


async def _contained(workflow: Awaitable[Any]) -> Any:
    """Await the workflow with its SystemExit / KeyboardInterrupt turned into WorkflowExit (see the module's
    docstring)."""
    try:
        return await workflow
    except (SystemExit, KeyboardInterrupt) as error:
        raise WorkflowExit(
            f"the workflow raised {type(error).__name__}({', '.join(map(repr, error.args))}); a workflow "
            "cannot end the run"
        ) from None


async def play_in_process(episode_fn: EpisodeFn, task: dict, tuner: ModelRouter, timeout_s: float) -> Any:
    """Run the workflow as a task of this event loop until it returns or its own time passes `timeout_s`."""
    loop = asyncio.get_running_loop()
    adopt_new_tasks(loop)
    with watching(loop) as watchdog:
        clock = EpisodeClock(
            str(task.get("task_id", task.get("id", "?"))),
            watchdog.shared_time,
            interrupt_after_s=timeout_s + CANCEL_GRACE_S,
        )
        with clock.current():
            workflow = asyncio.ensure_future(_contained(episode_fn(task, tuner)))
        clock.adopt(workflow)
        try:
            while not workflow.done() and clock.interrupted_at is None:
                remaining = timeout_s - clock.own_time()
                if remaining <= 0:
                    break
                # Own time grows no faster than wall time: it cannot pass the timeout before this wait ends.
                await asyncio.wait({workflow}, timeout=remaining)
            if clock.interrupted_at is None:
                if workflow.done():
                    if clock.own_time() <= timeout_s:
                        return _outcome(workflow)
                    raise EpisodeTimeout(
                        f"timed out after {timeout_s:g}s: it returned only {clock.own_time():.1f}s into "
                        f"its own time{_blocked(clock)}; its result is ignored"
                    )
                workflow.cancel()
                await asyncio.wait({workflow}, timeout=CANCEL_GRACE_S)
        except asyncio.CancelledError:  # the run itself was cancelled (Ctrl-C, SIGTERM): the episode goes with it
            # unwound first: abandoning (closing) a coroutine that is still scheduled leaves an asyncio traceback
            workflow.cancel()
            await asyncio.wait({workflow}, timeout=CANCEL_GRACE_S)
            clock.abandon()
            raise
    if clock.interrupted_at is not None:
        clock.abandon()  # whatever of it still runs: it is past its timeout + grace
        raise EpisodeTimeout(
            f"timed out after {timeout_s:g}s: it blocked the event loop at {clock.interrupted_at} and was "
            f"interrupted there {timeout_s + CANCEL_GRACE_S:g}s into its own time"
        )
    blocked = _blocked(clock)
    if not workflow.done():
        clock.abandon()
        raise EpisodeTimeout(
            f"timed out after {timeout_s:g}s{blocked}; it did not stop within {CANCEL_GRACE_S:g}s of its "
            "cancellation and was abandoned"
        )
    if not workflow.cancelled() and workflow.exception() is not None:
        error = workflow.exception()
        raise EpisodeTimeout(f"timed out after {timeout_s:g}s{blocked}; then raised {type(error).__name__}: {error}")
    raise EpisodeTimeout(
        f"timed out after {timeout_s:g}s{blocked}"
    )  # a result returned after the cancellation is ignored


def _blocked(clock: EpisodeClock) -> str:
    """Where the episode blocked the event loop, as a clause of a timeout's message; empty when it did not."""
    return f"; it blocked the event loop at {clock.blocked_at}" if clock.blocked_at else ""


def _outcome(workflow: asyncio.Task) -> Any:
    """The finished workflow's result; its exception as an ordinary one, so no episode can end the run."""
    if workflow.cancelled():
        raise RuntimeError("the workflow was cancelled by its own code (a CancelledError it did not catch)")
    error = workflow.exception()
    if error is not None and not isinstance(error, Exception):
        raise RuntimeError(f"the workflow raised {type(error).__name__}: {error}") from error
    return workflow.result()
