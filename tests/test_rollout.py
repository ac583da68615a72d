"""Episodes on the tiny model: recording, timeline merging, routing, errors become data."""

import asyncio

import pytest

from sparring import ServiceClient
from sparring.algorithms import assembly_metrics, build_datums
from sparring.rollout import (
    FrozenChatModel,
    PolicyChatModel,
    RunnerSettings,
    TunerHandle,
    Workflow,
    WorkflowOutput,
    WorkflowSignatureError,
    as_episode_fn,
    run_episodes,
)


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    service = ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt"))
    client = service.create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    policy = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults={"max_tokens": 6})
    frozen = FrozenChatModel(service.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 6}, agent="helper")
    return policy, frozen


def tuner_for(policy, frozen):
    return lambda: TunerHandle(policies={"policy": policy}, auxiliary_models={"helper": frozen})


async def four_turns(task, model, auxiliary_models):
    history = [{"role": "user", "content": "count with me"}]
    for turn in range(4):
        reply = await model(history)
        history += [reply.message, {"role": "user", "content": f"turn {turn} done"}]
        await auxiliary_models["helper"]([{"role": "user", "content": "say something"}])
    return WorkflowOutput(reward=1.0, metrics={"turns": 4.0})


def run(workflow, models, tasks=({"task_id": "0"},), group_size=1, **settings):
    return asyncio.run(run_episodes(as_episode_fn(workflow), list(tasks), tuner_for(*models), RunnerSettings(group_size=group_size, **settings)))


def test_a_four_turn_agent_is_one_timeline_with_four_completions(models):
    (episode,) = run(four_turns, models)
    assert episode.error is None and episode.num_calls == 4
    (timeline,) = episode.timelines
    assert timeline.agent == "policy" and timeline.num_calls == 4
    runs, inside = 0, False
    for mask in timeline.loss_mask:
        runs += mask and not inside
        inside = bool(mask)
    assert runs == 4
    policy_turns = [t for t in episode.transcripts["policy"] if t["trainable"]]
    assert sum(t["completion_tokens"] for t in policy_turns) == sum(timeline.loss_mask)
    assert [t["trainable"] for t in episode.transcripts["helper"]] == [False] * 4  # frozen: transcribed only
    merged = assembly_metrics([episode], build_datums([episode], {(0, "policy"): 1.0}))
    assert merged["timeline/merge_rate"] == pytest.approx(0.75)
    assert merged["tokens/saved_by_merging"] > 0
    assert episode.rewards == {"policy": 1.0}


def test_concurrent_episodes_never_mix(models):
    episodes = run(four_turns, models, tasks=[{"task_id": "a"}, {"task_id": "b"}], group_size=3)
    assert [e.group for e in episodes] == [0, 0, 0, 1, 1, 1]
    assert all(len(e.timelines) == 1 and e.timelines[0].num_calls == 4 for e in episodes)


class Duo(Workflow):
    trainable_targets = ["speaker"]

    async def execute(self, task, tuner):
        speaker = tuner.chat_model("alice", target_tag="speaker")
        listener = tuner.chat_model("bob", target_tag="listener", debug_model="helper")
        said = await speaker([{"role": "user", "content": "hi"}])
        await listener([{"role": "user", "content": said.content}])
        return WorkflowOutput(reward={"alice": 0.5})


def test_class_style_routes_trainable_and_frozen_agents(models):
    (episode,) = run(Duo, models)
    assert episode.error is None
    assert [t.agent for t in episode.timelines] == ["alice"]
    assert episode.roles == {"alice": "speaker", "bob": "listener"}
    assert episode.rewards == {"alice": 0.5}


class NoDebugModel(Workflow):
    trainable_targets = ["speaker"]

    async def execute(self, task, tuner):
        tuner.chat_model("bob", target_tag="listener")
        return WorkflowOutput(reward=1.0)


def test_an_untrained_agent_without_debug_model_is_an_error(models):
    (episode,) = run(NoDebugModel, models)
    assert "not a trainable target" in episode.error


def test_crashes_and_timeouts_become_penalised_episodes(models):
    async def crashes(task, model, auxiliary_models):
        await model([{"role": "user", "content": "hi"}])
        raise RuntimeError("board exploded")

    async def hangs(task, model, auxiliary_models):
        await model([{"role": "user", "content": "hi"}])
        await asyncio.sleep(30)

    (crashed,) = run(crashes, models, error_reward=-0.25)
    assert crashed.error == "RuntimeError: board exploded" and crashed.rewards == {"policy": -0.25}
    assert crashed.metrics["error"] == 1.0 and len(crashed.timelines) == 1
    (hung,) = run(hangs, models, episode_timeout_s=0.5)
    assert hung.error.startswith("timed out") and hung.rewards == {"policy": -0.1}


def test_bad_workflows_are_rejected_with_the_expected_signature():
    async def wrong(task):
        return WorkflowOutput(reward=0.0)

    def not_async(task, model, auxiliary_models):
        return WorkflowOutput(reward=0.0)

    class Empty(Workflow):
        trainable_targets = []

        async def execute(self, task, tuner):
            return WorkflowOutput(reward=0.0)

    for bad, message in ((wrong, "auxiliary_models"), (not_async, "not an async function"), (Empty, "trainable_targets is \\[\\]")):
        with pytest.raises(WorkflowSignatureError, match=message):
            as_episode_fn(bad)


def test_openai_client_shape_records_like_a_chat_model(models):
    class ViaOpenAI(Workflow):
        async def execute(self, task, tuner):
            client = tuner.as_openai_client("carol")
            completion = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            assert completion.choices[0].message.role == "assistant"
            return WorkflowOutput(reward=1.0)

    (episode,) = run(ViaOpenAI, models)
    assert episode.error is None and [t.agent for t in episode.timelines] == ["carol"]
    assert sum(episode.timelines[0].loss_mask) <= 4
