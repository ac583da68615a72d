"""Fault injection on the tiny model: every kind of faulty episode becomes an error episode of its kind, never a
dead run.

Faulty workflows (raise, nan/inf rewards, a string reward, string/None/list/nan metrics, a wrong return
type, bad turn rewards, a hang, a `time.sleep` that blocks the event loop, one that swallows its
cancellation, a `time.sleep(600)` or an endless Python loop on the event loop) run beside healthy ones;
the healthy ones complete and train, the timeouts hold on each episode's own time (a blocking episode is
interrupted at its timeout + grace), and time queued for a crowded sampler is shared out. Runs in which every
episode fails: tests/test_failing_runs.py; the episode clock and the interrupter alone:
tests/test_loop_interrupts.py.
"""

import asyncio
import itertools
import logging
import signal
import threading
import time

import pytest
from safetensors.torch import load_file

from sparring import (
    AlgorithmConfig,
    DatasetConfig,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerHandle,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)
from sparring.logging import read_metrics, read_rollouts
from sparring.rollout import ERROR_KINDS, PolicyChatModel, RunnerSettings, as_episode_fn, run_episodes
from sparring.rollout.loop_interrupt import INTERRUPT_SIGNAL
from sparring.rollout.player import CANCEL_GRACE_S

TIMEOUT_S = 1.5
BLOCK_S = 2.0  # longer than the timeout: every episode waiting meanwhile would time out if it were charged for it
QUIET = LoggingConfig(console=False, tensorboard=False)
REWARDS = itertools.count()
ENDED: dict[str, float] = {}
BLOCKERS: set[str] = (
    set()
)  # tasks whose first episode blocked the loop ("*_forever"): the others of its group are healthy

FAULTS = {
    "raise": "exception",
    "nan_reward": "nonfinite_reward",
    "inf_reward": "nonfinite_reward",
    "nan_in_reward_dict": "nonfinite_reward",
    "string_reward": "bad_reward",
    "list_reward": "bad_reward",
    "string_metric": "bad_metric",
    "none_metric": "bad_metric",
    "list_metric": "bad_metric",
    "nan_metric": "bad_metric",
    "wrong_type": "wrong_output_type",
    "nan_turn_rewards": "bad_turn_rewards",
    "bad_outcome": "bad_outcome",
    "hang": "timeout",
    "block": "timeout",
    "block_and_return": "timeout",
    "swallow": "timeout",
    "swallow_and_return": "timeout",
}


async def faulty(task, model, auxiliary_models):
    """Says one thing, then does what `task['fault']` says; 'healthy' returns a reward distinct from every other."""
    fault = task["fault"]
    try:
        said = await model([{"role": "user", "content": "hi"}])
        if fault == "healthy_slow":
            await asyncio.sleep(
                BLOCK_S + 0.8
            )  # running (not waiting on the sampler) before, while and after another episode blocks the loop
        if fault.startswith("healthy"):
            return WorkflowOutput(reward=float(next(REWARDS)), metrics={"length": len(said.tokens), "won": True})
        if fault == "raise":
            raise RuntimeError("scripted failure")
        if fault == "hang":
            await asyncio.sleep(60)
        if fault.startswith("block"):
            await asyncio.sleep(0.3)
            time.sleep(BLOCK_S)  # past its timeout, within the grace: not interrupted
            if fault == "block_and_return":
                return WorkflowOutput(reward=100.0)  # a result after its time: ignored
            await asyncio.sleep(60)
        if fault.endswith("_forever") and task["task_id"] not in BLOCKERS:
            BLOCKERS.add(task["task_id"])
            if fault == "sleep_forever":
                time.sleep(600)
            while True:  # busy_forever
                pass
        if fault.endswith("_forever"):
            return WorkflowOutput(reward=float(next(REWARDS)))
        if fault.startswith("swallow"):
            for _ in range(100):
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    if fault == "swallow_and_return":
                        return WorkflowOutput(reward=100.0)  # a late result: ignored
        return {
            "nan_reward": WorkflowOutput(reward=float("nan")),
            "inf_reward": WorkflowOutput(reward=float("inf")),
            "nan_in_reward_dict": WorkflowOutput(reward={"policy": float("nan")}),
            "string_reward": WorkflowOutput(reward="0.5"),
            "list_reward": WorkflowOutput(reward=[1.0]),
            "string_metric": WorkflowOutput(reward=1.0, metrics={"x": "a"}),
            "none_metric": WorkflowOutput(reward=1.0, metrics={"x": None}),
            "list_metric": WorkflowOutput(reward=1.0, metrics={"x": [1.0]}),
            "nan_metric": WorkflowOutput(reward=1.0, metrics={"x": float("nan")}),
            "wrong_type": {"reward": 1.0},
            "nan_turn_rewards": WorkflowOutput(reward=1.0, turn_rewards=[float("nan")]),
            "bad_outcome": WorkflowOutput(reward=1.0, outcome="victory"),
        }[fault]
    finally:
        ENDED[task["task_id"]] = time.monotonic()


def model_config(tiny_model_dir):
    return TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4)


def test_every_fault_is_an_error_episode_of_its_kind_and_the_healthy_ones_train(tiny_model_dir, tmp_path):
    tasks = [{"task_id": fault, "fault": fault} for fault in FAULTS] + [
        {"task_id": f"healthy-{i}", "fault": "healthy"} for i in range(2)
    ]
    algorithm = AlgorithmConfig(group_size=2, batch_size=len(tasks), learning_rate=1e-3)
    runner = RunnerConfig(episode_timeout_s=TIMEOUT_S, error_reward=-0.5)
    result = tune(
        faulty,
        train_dataset=DatasetConfig(tasks=tasks, total_steps=1, shuffle=False),
        model=model_config(tiny_model_dir),
        algorithm=algorithm,
        runner=runner,
        run_dir=tmp_path / "run",
        logging=QUIET,
    )

    assert result.steps == 1 and not result.interrupted  # 0 runs killed
    (metrics,) = read_metrics(tmp_path / "run")
    episodes = 2 * len(tasks)
    for kind in ERROR_KINDS:
        expected = 2 * sum(1 for found in FAULTS.values() if found == kind) / episodes
        assert metrics.get(f"episode/error_kind/{kind}", 0.0) == pytest.approx(expected), kind
    assert metrics["episode/error_rate"] == pytest.approx(2 * len(FAULTS) / episodes)
    assert metrics["workflow/length"] > 0 and metrics["workflow/won"] == 1.0  # the healthy episodes' metrics
    rows = read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl")
    assert sorted(row["task_id"] for row in rows) == sorted(task["task_id"] for task in tasks for _ in range(2))
    for row in rows:
        fault = row["task_id"]
        if fault.startswith("healthy"):
            assert row["error"] is None and row["error_kind"] is None and row["advantage"] not in (None, 0.0)
        else:
            assert row["error_kind"] == FAULTS[fault] and row["error"], row
            assert row["reward"] == -0.5 and row["advantage"] is None  # an all-penalty group has no signal: not trained
    assert metrics["tokens/trained"] > 0
    (path,) = result.sampler_paths.values()
    assert any(
        value.abs().sum() > 0
        for key, value in load_file(f"{path}/adapter_model.safetensors").items()
        if "lora_B" in key
    )


def test_error_messages_name_what_was_wrong(tiny_model_dir, tmp_path):
    tasks = [
        {"task_id": fault, "fault": fault}
        for fault in ("string_reward", "none_metric", "wrong_type", "swallow", "block")
    ]
    episodes = asyncio.run(
        run_episodes(
            as_episode_fn(faulty),
            tasks,
            tuner_for(policy(tiny_model_dir, tmp_path)),
            RunnerSettings(group_size=1, episode_timeout_s=TIMEOUT_S),
        )
    )
    errors = {episode.task["task_id"]: episode.error for episode in episodes}
    assert "reward is '0.5' (str), not a number" in errors["string_reward"]
    assert "metric x is None" in errors["none_metric"]
    assert "returned dict" in errors["wrong_type"]
    assert "did not stop within" in errors["swallow"] and "abandoned" in errors["swallow"]
    assert "blocked the event loop at" in errors["block"] and "test_faults.py" in errors["block"]


def policy(tiny_model_dir, tmp_path, sampler_wrapper=lambda sampler: sampler):
    service = ServiceClient(base_dir=tmp_path / "checkpoints")
    client = service.create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    return PolicyChatModel(
        sampler_wrapper(client.save_weights_and_get_sampling_client(kind="inflight")), defaults={"max_tokens": 6}
    )


def tuner_for(model):
    return lambda: TunerHandle(policies={"policy": model})


def play(model, faults, timeout_s=TIMEOUT_S):
    """Run one episode per fault concurrently; (episodes, seconds from the start to each episode's end)."""
    tasks = [{"task_id": f"{fault}-{index}", "fault": fault} for index, fault in enumerate(faults)]
    found = {}

    def run_them():
        found["episodes"] = asyncio.run(
            run_episodes(
                as_episode_fn(faulty),
                tasks,
                tuner_for(model),
                RunnerSettings(group_size=1, episode_timeout_s=timeout_s),
            )
        )

    started = time.monotonic()
    runner = threading.Thread(target=run_them, daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "the episodes never all ended: an abandoned one kept the event loop from closing"
    return found["episodes"], [ENDED[task["task_id"]] - started for task in tasks]


def test_hung_and_cancel_swallowing_episodes_end_at_their_own_timeout_and_the_others_complete(tiny_model_dir, tmp_path):
    faults = ["healthy"] * 4 + ["hang", "swallow", "swallow_and_return"]
    episodes, ended = play(policy(tiny_model_dir, tmp_path), faults)
    by_fault = dict(zip(faults, zip(episodes, ended, strict=True), strict=True))
    for episode, seconds in zip(episodes[:4], ended[:4], strict=True):
        assert episode.error is None and seconds < TIMEOUT_S
    hang, hang_ended = by_fault["hang"]
    assert hang.error_kind == "timeout" and TIMEOUT_S <= hang_ended < TIMEOUT_S + 1.0
    swallow, swallow_ended = by_fault["swallow"]
    assert (
        swallow.error_kind == "timeout"
        and TIMEOUT_S + CANCEL_GRACE_S <= swallow_ended < TIMEOUT_S + CANCEL_GRACE_S + 1.0
    )
    late, _ = by_fault["swallow_and_return"]
    assert late.error_kind == "timeout" and late.rewards == {"policy": -0.1}  # counted once, its late reward ignored


def test_an_episode_that_blocks_the_loop_is_named_and_the_others_are_not_charged_for_it(
    tiny_model_dir, tmp_path, caplog
):
    faults = ["block"] + ["healthy_slow"] * 4
    with caplog.at_level(logging.WARNING, logger="sparring.rollout.loop_watchdog"):
        episodes, ended = play(policy(tiny_model_dir, tmp_path), faults)
    block, *healthy = episodes
    assert all(episode.error is None for episode in healthy)  # they waited BLOCK_S > TIMEOUT_S, not on their own time
    assert block.error_kind == "timeout" and BLOCK_S <= ended[0] < TIMEOUT_S + CANCEL_GRACE_S + 0.3
    assert any(
        "blocked by the episode of task block-0" in record.message and "test_faults.py" in record.message
        for record in caplog.records
    )


def test_an_episode_that_returns_only_by_blocking_past_its_timeout_is_a_timeout(tiny_model_dir, tmp_path):
    faults = ["block_and_return"] + ["healthy_slow"] * 2
    episodes, ended = play(policy(tiny_model_dir, tmp_path), faults)
    late, *healthy = episodes
    assert all(episode.error is None for episode in healthy)
    assert late.error_kind == "timeout" and late.rewards == {"policy": -0.1}  # its reward of 100 came after its time
    assert (
        "returned only" in late.error
        and "its result is ignored" in late.error
        and ended[0] < TIMEOUT_S + CANCEL_GRACE_S
    ), late.error


class QueuedSampler:
    """The tiny model's sampler behind a queue that serves one call per `SERVE_S`: a crowded, loaded machine."""

    SERVE_S = 0.25

    def __init__(self, sampler):
        self.sampler = sampler
        self.queue = asyncio.Lock()

    def get_renderer(self):
        return self.sampler.get_renderer()

    async def sample(self, prompt, num_samples, sampling_params):
        async with self.queue:
            await asyncio.sleep(self.SERVE_S)
        return await self.sampler.sample(prompt, num_samples, sampling_params)


def test_time_queued_for_a_crowded_sampler_is_shared_out(tiny_model_dir, tmp_path):
    # 12 one-call episodes: the last waits 12 * 0.25 = 3 s for the sampler, but its share of that is ~0.8 s.
    episodes, ended = play(policy(tiny_model_dir, tmp_path, QueuedSampler), ["healthy"] * 12, timeout_s=2.0)
    assert [episode.error for episode in episodes] == [None] * 12
    assert max(ended) > 2.0 * 1.4  # the queue really was longer than the timeout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", ["sleep_forever", "busy_forever"])
def test_an_episode_blocking_the_loop_past_its_time_is_interrupted_there_and_the_others_train(
    tiny_model_dir, tmp_path, fault
):
    handler_before = signal.getsignal(INTERRUPT_SIGNAL)
    tasks = [{"task_id": fault, "fault": fault}] + [{"task_id": f"healthy-{i}", "fault": "healthy"} for i in range(3)]
    algorithm = AlgorithmConfig(group_size=2, batch_size=len(tasks), learning_rate=1e-3)
    runner = RunnerConfig(episode_timeout_s=TIMEOUT_S, error_reward=-0.5)
    result = tune(
        faulty,
        train_dataset=DatasetConfig(tasks=tasks, total_steps=1, shuffle=False),
        model=model_config(tiny_model_dir),
        algorithm=algorithm,
        runner=runner,
        run_dir=tmp_path / "run",
        logging=QUIET,
    )

    (metrics,) = result.history
    # It ends at its own timeout + grace (its share of the sampler wait before it blocked counts), not 600 s later.
    assert TIMEOUT_S + CANCEL_GRACE_S <= metrics["time/rollout"] < TIMEOUT_S + CANCEL_GRACE_S + 5.0
    assert metrics["episode/error_kind/timeout"] == pytest.approx(1 / 8) and metrics[
        "episode/error_rate"
    ] == pytest.approx(1 / 8)  # counted once
    rows = read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl")
    (blocked,) = [row for row in rows if row["error"]]
    line = "time.sleep(600)" if fault == "sleep_forever" else "while True:"
    assert blocked["error_kind"] == "timeout" and blocked["reward"] == -0.5
    assert (
        "interrupted there" in blocked["error"] and f"test_faults.py:{_line_of(line)} in faulty" in blocked["error"]
    ), blocked["error"]
    assert all(
        row["reward"] >= 0 and row["advantage"] not in (None, 0.0) for row in rows if not row["error"]
    )  # their own rewards, trained
    assert metrics["tokens/trained"] > 0
    assert signal.getsignal(INTERRUPT_SIGNAL) == handler_before  # nothing left installed after the step


def _line_of(text: str) -> int:
    """The first line of this file that starts with `text` (in `faulty`)."""
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if line.strip().startswith(text))
