"""The Ray runner on a local two-CPU cluster: workflows run in Ray worker processes, their model calls
come back to the trainer's sampler and recorder, timelines and rewards come out as in process (same tokens under
the same seeds), and raising, hanging and blocking episodes become error episodes while the healthy ones train."""

import asyncio
import os
import sys
import threading
import time

import pytest

ray = pytest.importorskip(
    "ray", reason="Ray is not installed (pip install 'sparring[ray]'); the Ray runner is not tested"
)

from sparring import (  # noqa: E402
    AlgorithmConfig,
    DatasetConfig,
    JudgeOutput,
    LoggingConfig,
    RunnerConfig,
    TunerHandle,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)
from sparring.logging import read_metrics, read_rollouts  # noqa: E402
from sparring.rollout import RunnerSettings, Workflow, as_episode_fn, current_recorder, run_episodes  # noqa: E402
from sparring.runners.ray import WorkflowNotSendableError, ray_runner  # noqa: E402

QUIET = LoggingConfig(console=False, tensorboard=False)


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: two CPUs (two worker processes)."""
    from ray import cloudpickle

    # pytest imports this file by a name workers cannot import: send its functions by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray_runner()
    ray.shutdown()


@pytest.fixture(scope="module")
def models(policy_and_helper):
    policy, frozen = policy_and_helper
    return lambda: TunerHandle(policies={"policy": policy}, auxiliary_models={"helper": frozen})


class SeededTalk(Workflow):
    """Two turns of one conversation, a critic over the OpenAI-compatible client, a helper; seeded, so tokens repeat."""

    trainable_targets = ["talker", "critic"]

    async def execute(self, task, tuner):
        seed = task["seed"]
        talker = tuner.chat_model("talker")
        history = [{"role": "user", "content": f"talk {seed}"}]
        first = await talker(history, seed=seed)
        history += [first.message, {"role": "user", "content": "go on"}]
        second = await talker(history, seed=seed + 1)
        critic = tuner.as_openai_client("critic")  # on a worker: its own in-process endpoint, then the link
        await critic.chat.completions.create(
            model="critic", messages=[{"role": "user", "content": "judge that"}], seed=seed + 2, max_tokens=6
        )
        await tuner.auxiliary_models["helper"]([{"role": "user", "content": "and you?"}], seed=seed + 3)
        seen = [(reply.tokens, reply.logprobs) for reply in (first, second)]
        return WorkflowOutput(reward=None, response={"pid": os.getpid(), "seen": seen})


def judge_seen(task, response, auxiliary_models):
    """Runs in the trainer: were the replies the workflow saw exactly the calls the trainer recorded?"""
    recorded = [(call.completion_tokens, call.logprobs) for call in current_recorder().calls if call.agent == "talker"]
    exact = recorded == [(list(tokens), list(logprobs)) for tokens, logprobs in response["seen"]]
    return JudgeOutput(
        reward={"talker": float(len(response["seen"][0][0])), "critic": 0.5},
        metrics={"pid": float(response["pid"]), "exact": float(exact)},
    )


def test_episodes_run_on_workers_and_come_back_as_in_process(cluster, models):
    tasks = [{"task_id": str(i), "seed": 10 * i} for i in range(2)]
    episode_fn = as_episode_fn(SeededTalk)
    local = asyncio.run(run_episodes(episode_fn, tasks, models, RunnerSettings(group_size=2), judge_seen))
    remote = asyncio.run(
        run_episodes(episode_fn, tasks, models, RunnerSettings(group_size=2, play=cluster.play), judge_seen)
    )

    assert cluster.server.base_url.startswith("http://127.0.0.1:")  # a local cluster: calls come back on loopback only
    pids = {int(episode.metrics["judge/pid"]) for episode in remote}
    assert os.getpid() not in pids and len(pids) >= 2, pids  # in other processes, more than one
    assert {int(episode.metrics["judge/pid"]) for episode in local} == {os.getpid()}
    for here, there in zip(local, remote, strict=True):
        assert here.error is None and there.error is None, (here.error, there.error)
        assert there.metrics["judge/exact"] == 1.0  # the worker saw exactly what the trainer recorded
        assert (there.task, there.group, there.num_calls, there.roles) == (
            here.task,
            here.group,
            here.num_calls,
            here.roles,
        )
        assert there.rewards == here.rewards and set(there.rewards) == {"talker", "critic"}
        assert {agent: len(calls) for agent, calls in there.transcripts.items()} == {
            agent: len(calls) for agent, calls in here.transcripts.items()
        }
        assert [(t.agent, t.model, t.num_calls) for t in there.timelines] == [
            (t.agent, t.model, t.num_calls) for t in here.timelines
        ]
        assert {t.agent: t.num_calls for t in there.timelines} == {
            "talker": 2,
            "critic": 1,
        }  # two turns merged, as in process
        assert {agent: [c["trainable"] for c in calls] for agent, calls in there.transcripts.items()} == {
            "talker": [True, True],
            "critic": [True],
            "helper": [False],
        }
        for a, b in zip(here.timelines, there.timelines, strict=True):
            assert (a.tokens, a.loss_mask, a.call_index) == (
                b.tokens,
                b.loss_mask,
                b.call_index,
            )  # same seeds, same tokens
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)  # batched differently, same model


def test_a_workflow_that_cannot_be_sent_fails_clearly(cluster, models, tmp_path):
    lock = threading.Lock()

    async def holds_a_lock(task, model, auxiliary_models):
        with lock:
            return WorkflowOutput(reward=1.0)

    with pytest.raises(
        WorkflowNotSendableError, match="cannot be pickled.*lock"
    ):  # before any model loads: the path does not exist
        tune(
            workflow_func=holds_a_lock,
            train_dataset=DatasetConfig(tasks=[{}]),
            model=TunerModelConfig(model_path="does-not-exist"),
            runner=RunnerConfig(backend="ray"),
            run_dir=tmp_path / "run",
            logging=QUIET,
        )

    # A workflow whose module exists only in the trainer: the worker cannot load it, and the run stops saying so.
    (tmp_path / "trainer_only_module.py").write_text(
        "async def workflow(task, model, auxiliary_models):\n    return None\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import trainer_only_module

        with pytest.raises(WorkflowNotSendableError, match="could not load the workflow: ModuleNotFoundError"):
            asyncio.run(
                run_episodes(
                    as_episode_fn(trainer_only_module.workflow),
                    [{}],
                    models,
                    RunnerSettings(group_size=1, play=cluster.play),
                )
            )
    finally:
        sys.path.remove(str(tmp_path))


async def sometimes_fails(task, model, auxiliary_models):
    await model([{"role": "user", "content": task["topic"]}])
    if task["topic"] == "raise":
        raise ValueError("scripted failure")
    if task["topic"] == "hang":
        await asyncio.sleep(600)
    if task["topic"] == "block":
        time.sleep(600)  # blocks the worker's event loop: only the trainer's backstop can stop it
    return WorkflowOutput(reward=1.0)


def test_raising_hanging_and_blocking_episodes_become_errors_and_the_rest_trains(cluster, tiny_model_dir, tmp_path):
    topics = ["fine", "raise", "hang", "block"]
    result = tune(
        workflow_func=sometimes_fails,
        train_dataset=DatasetConfig(
            tasks=[{"task_id": topic, "topic": topic} for topic in topics], total_steps=1, shuffle=False
        ),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4),
        algorithm=AlgorithmConfig(
            algorithm_type="reinforce", drop_zero_variance_groups=False, group_size=2, batch_size=4
        ),
        runner=RunnerConfig(episode_timeout_s=3, error_reward=-0.5, backend="ray"),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    assert result.steps == 1
    rows = read_rollouts(tmp_path / "run" / "rollouts" / "step_1.jsonl")
    assert {row["task_id"]: row["error"] for row in rows} == {
        "fine": None,
        "raise": "ValueError: scripted failure",
        "hang": "timed out after 3s",
        "block": "timed out after 3s",
    }
    assert {row["task_id"]: row["advantage"] for row in rows} == {
        "fine": 1.0,
        "raise": -0.5,
        "hang": -0.5,
        "block": -0.5,
    }  # reinforce: the reward
    metrics = read_metrics(tmp_path / "run")[0]
    assert (
        metrics["episode/error_rate"] == pytest.approx(0.75)
        and metrics["tokens/trained"] > 0
        and "train/loss" in metrics
    )
    assert metrics["time/rollout"] < 120  # the hanging and blocked workers (600 s) were abandoned, the step went on


async def exits_the_process(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    if task["topic"] == "os._exit":
        os._exit(3)  # in process this would end the run; on Ray it ends only this episode's worker
    return WorkflowOutput(reward=float(len(said.tokens)))


def test_os_exit_in_an_episode_on_ray_ends_only_its_worker_and_is_an_error_episode(cluster, tiny_model_dir, tmp_path):
    topics = ["fine", "os._exit"]
    result = tune(
        workflow_func=exits_the_process,
        train_dataset=DatasetConfig(tasks=[{"task_id": topic, "topic": topic} for topic in topics], total_steps=2),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4),
        # One episode a task: each step's os._exit costs a worker (and its start again) of its own.
        algorithm=AlgorithmConfig(
            algorithm_type="reinforce", drop_zero_variance_groups=False, group_size=1, batch_size=2
        ),
        runner=RunnerConfig(episode_timeout_s=30, error_reward=-0.5, backend="ray"),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    assert result.steps == 2 and not result.interrupted
    for step in (1, 2):  # rollout files are numbered from 1, as the console and metrics.jsonl
        rows = read_rollouts(tmp_path / "run" / "rollouts" / f"step_{step}.jsonl")
        errors = {row["task_id"]: row["error"] for row in rows}
        assert errors["fine"] is None and errors["os._exit"], errors
        assert {row["task_id"]: row["error_kind"] for row in rows}["os._exit"] == "exception"
        assert errors["os._exit"].startswith("WorkerCrashedError"), errors
