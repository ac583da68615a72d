"""The two mechanisms behind episode timeouts, alone: an episode's clock (its share of sampler waits, none of other
episodes' stalls of the event loop) and the interrupter that raises in the main thread where a blocking episode
is, only when asked."""

import signal
import threading
import time

import pytest

from sparring.rollout.episode_clock import EpisodeClock, SharedTime
from sparring.rollout.loop_interrupt import INTERRUPT_SIGNAL, MainThreadInterrupter


def test_an_episode_clock_charges_shares_of_sampler_waits_and_none_of_others_stalls():
    shared = SharedTime()
    waiting = [EpisodeClock(f"w{i}", shared) for i in range(4)]
    running = EpisodeClock("r", shared)
    waits = [clock.waiting_for_sampler() for clock in waiting]
    for wait in waits:
        wait.__enter__()
    time.sleep(0.4)
    for wait in waits:
        wait.__exit__(None, None, None)
    for clock in waiting:
        assert clock.own_time() == pytest.approx(0.1, abs=0.05)  # a quarter of the 0.4 s wait
    assert running.own_time() == pytest.approx(0.4, abs=0.05)
    blocker = EpisodeClock("b", shared)
    shared.begin_stall(time.monotonic(), blocker)
    time.sleep(0.3)
    # Before the stall is ended (the loop may resume others first), the clocks already stand still but the blocker's.
    assert running.own_time() == pytest.approx(0.4, abs=0.05) and blocker.own_time() == pytest.approx(0.3, abs=0.05)
    seconds, culprit = shared.end_stall(time.monotonic())
    culprit.charge_stall(seconds, "here")
    assert running.own_time() == pytest.approx(0.4, abs=0.05) and blocker.own_time() == pytest.approx(0.3, abs=0.05)


def test_the_interrupter_raises_in_the_main_thread_only_when_the_decision_says_so():
    def later(interrupter, decide):
        threading.Timer(0.2, interrupter.interrupt, args=(decide,)).start()

    called_before = []

    def handler_before(signum, frame):
        called_before.append(signum)

    previous = signal.signal(INTERRUPT_SIGNAL, handler_before)
    interrupter = MainThreadInterrupter()
    try:
        assert interrupter.install()
        frames = []
        later(interrupter, lambda frame: frames.append(frame))  # the moment passed: no-op, the sleep goes on
        started = time.monotonic()
        time.sleep(0.6)
        assert (
            time.monotonic() - started >= 0.6 and frames and frames[0].f_code.co_name.startswith("test_the_interrupter")
        )
        later(interrupter, lambda frame: ValueError("stop here"))
        started = time.monotonic()
        with pytest.raises(ValueError, match="stop here"):
            time.sleep(30)
        later(interrupter, lambda frame: ValueError("stop the loop"))
        with pytest.raises(ValueError, match="stop the loop"):
            while time.monotonic() - started < 30:
                pass
        assert time.monotonic() - started < 5
        signal.pthread_kill(threading.main_thread().ident, INTERRUPT_SIGNAL)  # not ours: the previous handler gets it
        time.sleep(0.1)
        assert called_before == [INTERRUPT_SIGNAL]
    finally:
        interrupter.restore()
        restored = signal.getsignal(INTERRUPT_SIGNAL)
        signal.signal(INTERRUPT_SIGNAL, previous)
    assert restored is handler_before and not interrupter.interrupt(
        lambda frame: ValueError("late")
    )  # restored: nothing is sent
    off_main = []
    worker = threading.Thread(target=lambda: off_main.append(MainThreadInterrupter().install()))
    worker.start()
    worker.join()
    assert off_main == [False]  # a loop outside the main thread keeps today's behaviour: named, not interrupted
