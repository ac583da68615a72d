"""Fault accounting: a healthy episode is never charged for another episode's fault.

Every fault kind (raise, hang, swallow the cancellation, block the event loop
with `time.sleep`, sleep or busy-loop on it forever) plays in one step beside
healthy episodes that run, wait on a crowded (scripted) sampler and return
well inside their timeout, again and again: not one healthy episode may be
marked a fault, whatever order the event loop resumes them in after a stall.
The episodes call no model, so a step costs only the faults' own time; the
cancellation grace is shortened to keep the repetitions quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

from sparring.rollout import RunnerSettings, WorkflowOutput, player, run_episodes
from sparring.rollout.episode_clock import EpisodeClock, sampler_wait
from sparring.rollout.loop_watchdog import watching

TIMEOUT_S = 0.5
GRACE_S = 0.25
ROUNDS = int(os.environ.get("SPARRING_FAULT_ROUNDS", "10"))
"""Steps played in a row: 10 in the suite; `SPARRING_FAULT_ROUNDS=100` looks longer for a rarer resume order."""
HEALTHY = 4
GO_S = 0.2
"""When the blocking faults start and the healthy episodes return, all woken at once by one event (`go`)."""
FAULTS = ["raise", "hang", "swallow", "block", "sleep_forever", "busy_forever"]


async def episode(task: dict, tuner) -> WorkflowOutput:
    """Healthy: four short turns (a sampler call queued behind the others, then a think), then a think (or, for the
    last one, a wait on the sampler) that the blocking faults' stall spans, and it returns. The last one is woken
    in the same turn of the loop as the blocking faults, after them: it leaves its sampler wait right after the
    loop was blocked, before the watchdog's heartbeat has run (where it used to be charged the whole stall). A
    fault does what it names."""
    fault, go = task["fault"], task["go"]
    if fault == "healthy":
        for _ in range(4):
            with sampler_wait():
                async with task["sampler"]:
                    await asyncio.sleep(0.002)
            await asyncio.sleep(0.01)
        if task["last"]:
            with sampler_wait():
                await go.wait()
        else:
            await asyncio.sleep(GO_S)
        return WorkflowOutput(reward=1.0)
    if fault == "raise":
        raise RuntimeError("scripted failure")
    if fault == "hang":
        await asyncio.sleep(60)
    if fault == "swallow":
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                pass
    await go.wait()
    if fault == "block":
        time.sleep(TIMEOUT_S + 0.1)  # past its timeout, inside the grace: not interrupted
        await asyncio.sleep(60)
    if fault == "sleep_forever":
        time.sleep(600)
    while True:  # busy_forever
        pass


async def play_step(round_: int) -> list:
    shared = {"sampler": asyncio.Lock(), "go": asyncio.Event()}
    faults = [{"task_id": f"{fault}-{round_}", "fault": fault, **shared} for fault in FAULTS]
    healthy = [
        {"task_id": f"healthy-{index}-{round_}", "fault": "healthy", "last": index == HEALTHY - 1, **shared}
        for index in range(HEALTHY)
    ]
    tasks = healthy[:-1] + faults + healthy[-1:]
    asyncio.get_running_loop().call_later(GO_S, shared["go"].set)
    return await run_episodes(episode, tasks, lambda: None, RunnerSettings(group_size=1, episode_timeout_s=TIMEOUT_S))


@contextlib.contextmanager
def no_collection_pause():
    """The heap collected before the step, and the collector off during it."""
    # A full collection of this process's heap (torch loaded, pytest's records) took 0.25 s on some machines. Run
    # inside the step it blocks the loop before the episodes have started: nobody's fault, so every clock counts it,
    # as it counts a slow machine, and it ate the healthy episodes' whole margin (0.25 s of their 0.5 s).
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.timeout(120)
def test_no_healthy_episode_is_charged_for_any_fault_beside_it(monkeypatch, caplog):
    assert threading.current_thread() is threading.main_thread()  # the watchdog interrupts the blocking ones here
    monkeypatch.setattr(player, "CANCEL_GRACE_S", GRACE_S)
    charged, kinds = [], set()
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="sparring.rollout.runner"):
        for round_ in range(ROUNDS):
            with no_collection_pause():
                step = asyncio.run(play_step(round_))
            for played in step:
                if played.task["fault"] == "healthy":
                    if played.error is not None:
                        charged.append(f"round {round_}: {played.task['task_id']}: {played.error}")
                else:
                    kinds.add((played.task["fault"], played.error_kind))
    took = time.monotonic() - started
    print(f"\n{ROUNDS} steps of {len(FAULTS)} faults beside {HEALTHY} healthy episodes in {took:.1f} s")
    assert not charged, charged
    assert kinds == {("raise", "exception"), *((fault, "timeout") for fault in FAULTS if fault != "raise")}


STARVED_CPU_S = 0.3
"""The most CPU the starved loop's code uses: under the watchdog's bound of what counts as code holding the loop."""
HOGS = 3


def _late_loop(mode: str, cpu: int) -> dict:
    """An event loop on a thread pinned to `cpu` at the lowest priority (its watchdog's thread is not), whose code
    for ~1.2 s either computes ('compute', on what little CPU comes its way: a starved machine) or sleeps ('sleep':
    code blocking it)."""
    found: dict = {}

    def run() -> None:
        async def main() -> None:
            with watching(asyncio.get_running_loop()) as watchdog:
                # Starve this thread only, once the watchdog's thread is started: a thread inherits its creator's
                # CPU and priority, and a watchdog starved alike may not look until the loop has turned again.
                os.sched_setaffinity(0, {cpu})
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
                bystander, began = EpisodeClock("bystander", watchdog.shared_time), time.monotonic()
                await asyncio.sleep(0.3)
                started, cpu_before = time.monotonic(), time.thread_time()
                if mode == "sleep":
                    time.sleep(1.2)
                while time.monotonic() - started < 1.2 and time.thread_time() - cpu_before < STARVED_CPU_S:
                    pass
                found["cpu"] = time.thread_time() - cpu_before
                await asyncio.sleep(0.3)
                found["elapsed"], found["own"] = time.monotonic() - began, bystander.own_time()

        asyncio.run(main())

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=60)
    return found


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/self/task"), reason="needs Linux")
def test_a_loop_starved_of_cpu_is_not_blamed_but_code_blocking_it_is(caplog):
    cpu = min(os.sched_getaffinity(0))
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)
    ]  # take the CPU from the loop's thread
    try:
        for hog in hogs:
            os.sched_setaffinity(hog.pid, {cpu})
        with caplog.at_level(logging.INFO, logger="sparring.rollout.loop_watchdog"):
            starved = _late_loop("compute", cpu)
            starved_log = [record.getMessage() for record in caplog.records]
            caplog.clear()
            blocked = _late_loop("sleep", cpu)
            blocked_log = [record.getMessage() for record in caplog.records]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    if starved["cpu"] >= STARVED_CPU_S:
        pytest.skip(
            f"the loop's thread got {starved['cpu']:.2f} s of CPU beside {HOGS} busy processes: not starved here"
        )
    assert not any("is blocked" in message for message in starved_log), starved_log
    assert any("no code holds it" in message and "overloaded" in message for message in starved_log), starved_log
    assert starved["own"] == pytest.approx(starved["elapsed"], abs=0.3)  # a slow machine is everybody's time
    assert any("is blocked" in message and "test_fault_accounting.py" in message for message in blocked_log), (
        blocked_log
    )
    assert blocked["own"] < blocked["elapsed"] - 0.8  # the sleep was taken off the bystander's clock
