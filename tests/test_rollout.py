"""Episodes on the tiny model: recording, timeline merging, routing, errors become data."""

import asyncio

import openai
import pytest
from scripted_sampler import ScriptedSampler

from sparring import TunerHandle
from sparring.algorithms import assembly_metrics, build_datums
from sparring.rollout import (
    FrozenChatModel,
    RunnerSettings,
    Workflow,
    WorkflowOutput,
    WorkflowSignatureError,
    as_episode_fn,
    run_episodes,
)


def tuner_for(policy, frozen):
    return lambda: TunerHandle(policies={"policy": policy}, auxiliary_models={"helper": frozen})


async def four_turns(task, model, auxiliary_models):
    history = [{"role": "user", "content": "count with me"}]
    for turn in range(4):
        reply = await model(history)
        history += [reply.message, {"role": "user", "content": f"turn {turn} done"}]
        await auxiliary_models["helper"]([{"role": "user", "content": "say something"}])
    return WorkflowOutput(reward=1.0, metrics={"turns": 4.0})


def run(workflow, policy_and_helper, tasks=({"task_id": "0"},), group_size=1, **settings):
    return asyncio.run(
        run_episodes(
            as_episode_fn(workflow),
            list(tasks),
            tuner_for(*policy_and_helper),
            RunnerSettings(group_size=group_size, **settings),
        )
    )


def test_a_four_turn_agent_is_one_timeline_with_four_completions(policy_and_helper):
    (episode,) = run(four_turns, policy_and_helper)
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
    assert [index for index, mask in zip(timeline.call_index, timeline.loss_mask, strict=True) if mask] == sorted(
        index for index in timeline.call_index if index >= 0
    ) and set(timeline.call_index) == {-1, 0, 1, 2, 3}
    assert all((index >= 0) == bool(mask) for index, mask in zip(timeline.call_index, timeline.loss_mask, strict=True))


def test_turn_rewards_reach_the_episode_and_bad_ones_become_error_episodes(policy_and_helper):
    def with_turn_rewards(turn_rewards):
        async def workflow(task, model, auxiliary_models):
            await four_turns(task, model, auxiliary_models)
            return WorkflowOutput(reward=1.0, turn_rewards=turn_rewards)

        return workflow

    (good,) = run(with_turn_rewards([0.1, 0.2, 0.3, 0.4]), policy_and_helper)
    assert good.error is None and good.turn_rewards == {"policy": [0.1, 0.2, 0.3, 0.4]}
    for bad, reason in [
        ([0.1, 0.2], "has 2 values but the agent made 4"),
        ({"nobody": [1.0]}, "'nobody', which made no trainable call"),
        ([0.1, 0.2, float("nan"), 0.4], "not a finite number"),
    ]:
        (episode,) = run(with_turn_rewards(bad), policy_and_helper)
        assert reason in episode.error and episode.turn_rewards == {} and episode.rewards == {"policy": -0.1}


def test_concurrent_episodes_never_mix(policy_and_helper):
    episodes = run(four_turns, policy_and_helper, tasks=[{"task_id": "a"}, {"task_id": "b"}], group_size=3)
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


def test_class_style_routes_trainable_and_frozen_agents(policy_and_helper):
    (episode,) = run(Duo, policy_and_helper)
    assert episode.error is None
    assert [t.agent for t in episode.timelines] == ["alice"]
    assert episode.roles == {"alice": "speaker", "bob": "listener"}
    assert episode.rewards == {"alice": 0.5}


class NoDebugModel(Workflow):
    trainable_targets = ["speaker"]

    async def execute(self, task, tuner):
        tuner.chat_model("bob", target_tag="listener")
        return WorkflowOutput(reward=1.0)


def test_an_untrained_agent_without_debug_model_is_an_error(policy_and_helper):
    (episode,) = run(NoDebugModel, policy_and_helper)
    assert "not a trainable target" in episode.error


def test_crashes_and_timeouts_become_penalised_episodes(policy_and_helper):
    async def crashes(task, model, auxiliary_models):
        await model([{"role": "user", "content": "hi"}])
        raise RuntimeError("board exploded")

    async def hangs(task, model, auxiliary_models):
        await model([{"role": "user", "content": "hi"}])
        await asyncio.sleep(30)

    (crashed,) = run(crashes, policy_and_helper, error_reward=-0.25)
    assert crashed.error == "RuntimeError: board exploded" and crashed.rewards == {"policy": -0.25}
    assert crashed.failed and crashed.failure[0] == "exception" and len(crashed.timelines) == 1
    (hung,) = run(hangs, policy_and_helper, episode_timeout_s=3.0)
    assert hung.error.startswith("timed out") and hung.rewards == {"policy": -0.1}


def test_repeated_episode_failures_are_one_warning_with_a_count(policy_and_helper, caplog):
    async def crashes(task, model, auxiliary_models):
        raise RuntimeError(f"board exploded on {task['task_id']}")

    tasks = [{"task_id": str(n)} for n in range(9)]
    with caplog.at_level("WARNING", logger="sparring.rollout"):
        episodes = run(crashes, policy_and_helper, tasks=tasks, group_size=2)
    assert len(episodes) == 18 and all(episode.failed for episode in episodes)
    (warning,) = [record.getMessage() for record in caplog.records if "failed" in record.getMessage()]
    assert warning.startswith(
        "18 of 18 episodes failed (exception), tasks 0, 1, 2, 3, 4 and 4 more: RuntimeError: board exploded on 0"
    )
    assert warning.endswith("(and 8 other messages)")


def test_a_workflow_that_swallows_the_timeout_still_times_out(policy_and_helper):
    async def stubborn(task, model, auxiliary_models):
        await model([{"role": "user", "content": "hi"}])
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass  # what some agent frameworks do
        return WorkflowOutput(reward=1.0)

    (episode,) = run(stubborn, policy_and_helper, episode_timeout_s=3.0)
    assert episode.error.startswith("timed out") and episode.rewards == {"policy": -0.1}


def test_bad_workflows_are_rejected_with_the_expected_signature():
    async def wrong(task):
        return WorkflowOutput(reward=0.0)

    def not_async(task, model, auxiliary_models):
        return WorkflowOutput(reward=0.0)

    class Empty(Workflow):
        trainable_targets = []

        async def execute(self, task, tuner):
            return WorkflowOutput(reward=0.0)

    for bad, message in (
        (wrong, "auxiliary_models"),
        (not_async, "not an async function"),
        (Empty, "trainable_targets is \\[\\]"),
    ):
        with pytest.raises(WorkflowSignatureError, match=message):
            as_episode_fn(bad)


def test_openai_client_records_like_a_chat_model(policy_and_helper):
    class ViaOpenAI(Workflow):
        async def execute(self, task, tuner):
            client = tuner.as_openai_client("carol")
            assert isinstance(client, openai.AsyncOpenAI)
            completion = await client.chat.completions.create(
                model="any", messages=[{"role": "user", "content": "hi"}], max_tokens=4, logprobs=True
            )
            assert completion.choices[0].message.role == "assistant"
            return WorkflowOutput(reward=1.0, metrics={"logprob": completion.choices[0].logprobs.content[0].logprob})

    (episode,) = run(ViaOpenAI, policy_and_helper)
    assert episode.error is None and [t.agent for t in episode.timelines] == ["carol"]
    (timeline,) = episode.timelines
    assert 0 < sum(timeline.loss_mask) <= 4
    assert (
        timeline.logprobs[timeline.loss_mask.index(1)] == episode.metrics["logprob"]
    )  # the SDK saw the sampler's logprob


TOOLS = [
    {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    }
    for name in ("lookup", "add")
]
FORCE_LOOKUP = {"type": "function", "function": {"name": "lookup"}}


def test_a_forced_tool_call_is_prompt_prefill_plus_trained_arguments_and_its_result_merges(policy_and_helper):
    policy, frozen = policy_and_helper
    renderer = policy.renderer
    prefill = renderer.tool_call_prefill("lookup")
    replies = []

    async def forced_then_result(task, model, auxiliary_models):
        history = [{"role": "user", "content": "look something up"}]
        replies.append(await model(history, tools=TOOLS, tool_choice=FORCE_LOOKUP))
        call = replies[0].tool_calls[0]
        assert call["function"]["name"] == "lookup"  # the tiny random model's arguments are garbage, its call is not
        history += [replies[0].message, {"role": "tool", "tool_call_id": call["id"], "content": "RESULT"}]
        replies.append(await model(history, tools=TOOLS))
        frozen_reply = await auxiliary_models["helper"](
            [{"role": "user", "content": "hi"}], tools=TOOLS, tool_choice=FORCE_LOOKUP
        )
        assert frozen_reply.tool_calls[0]["function"]["name"] == "lookup"
        return WorkflowOutput(reward=1.0)

    (episode,) = run(forced_then_result, policy_and_helper)
    assert episode.error is None and episode.num_calls == 2
    (timeline,) = episode.timelines
    assert timeline.num_calls == 2
    prompt_length = replies[0].prompt_tokens
    assert renderer.decode(timeline.tokens[:prompt_length]).endswith(
        "<|im_start|>assistant\n" + prefill
    )  # the prefill is prompt...
    assert timeline.loss_mask[:prompt_length] == [0] * prompt_length  # ...never trained
    first_end = prompt_length + len(replies[0].tokens)
    assert timeline.tokens[prompt_length:first_end] == replies[0].tokens and timeline.loss_mask[
        prompt_length:first_end
    ] == [1] * len(replies[0].tokens)
    trained = [(t, lp) for t, m, lp in zip(timeline.tokens, timeline.loss_mask, timeline.logprobs, strict=True) if m]
    assert trained == list(
        zip(replies[0].tokens + replies[1].tokens, replies[0].logprobs + replies[1].logprobs, strict=True)
    )  # exactly the sampled tokens
    assert "RESULT" in renderer.decode([t for t, m in zip(timeline.tokens, timeline.loss_mask, strict=True) if not m])
    assert [t["trainable"] for t in episode.transcripts["helper"]] == [False]


def test_tool_choice_modes_shape_the_prompt_and_the_parse(policy_and_helper):
    renderer = policy_and_helper[0].renderer
    call_add = '<tool_call>\n{"name": "add", "arguments": {"x": 1}}\n</tool_call>'
    sampler = ScriptedSampler(renderer, [call_add] * 4)
    model = FrozenChatModel(sampler)
    messages = [{"role": "user", "content": "add one"}]
    replies = {
        mode: asyncio.run(model(messages, tools=TOOLS, tool_choice=mode)) for mode in ("auto", "none", "required")
    }
    auto_prompt, none_prompt, required_prompt = sampler.prompts
    assert none_prompt == auto_prompt  # "none" keeps the tools in the prompt (same timeline), it only reads no calls
    assert required_prompt == auto_prompt + renderer.encode_text("<tool_call>\n")
    assert (
        replies["auto"].tool_calls[0]["function"]["name"]
        == "add"
        == replies["required"].tool_calls[0]["function"]["name"]
    )
    assert replies["none"].message == {"role": "assistant", "content": call_add}
    asyncio.run(model(messages, tools=TOOLS[1:], tool_choice="required"))  # one tool: "required" forces it
    assert sampler.prefills[-1] == renderer.tool_call_prefill("add")

    for tool_choice, tools, error in (
        ({"type": "function", "function": {"name": "subtract"}}, TOOLS, "'subtract'"),
        ("required", None, "'required'"),
        (FORCE_LOOKUP, None, "'lookup'"),
        ("always", TOOLS, "'always'"),
        ({"type": "function", "name": "lookup"}, TOOLS, "tool_choice must be one of"),
    ):
        with pytest.raises(ValueError, match=error):
            asyncio.run(policy_and_helper[1](messages, tools=tools, tool_choice=tool_choice))
    assert (
        asyncio.run(policy_and_helper[1](messages, tool_choice="none")).tool_calls == []
    )  # nothing to choose from: fine


def test_the_runner_reports_each_episode_as_it_finishes(policy_and_helper):
    finished = []

    async def episode_fn(task, tuner):
        await asyncio.sleep(0.05 * task["delay"])
        return WorkflowOutput(reward=1.0)

    tasks = [{"delay": 2}, {"delay": 0}]
    episodes = asyncio.run(
        run_episodes(
            episode_fn,
            tasks,
            tuner_for(*policy_and_helper),
            RunnerSettings(group_size=1),
            on_episode=lambda episode: finished.append(episode.task["delay"]),
        )
    )
    assert [episode.task["delay"] for episode in episodes] == [2, 0] and finished == [0, 2]


def test_a_frozen_model_continues_its_own_sampled_tokens_across_calls(policy_and_helper):
    """A frozen player's next prompt starts with the exact tokens of its last prompt and reply (as a trained one's
    does), not a re-rendering of the reply's text: a prefix cache and a batch's shared prefix then match up to the
    new message. The tiny model's random replies rarely survive decoding and encoding again, so a re-rendering fails."""
    _, frozen = policy_and_helper
    prompts = []

    class Watched:
        def __init__(self, sampler):
            self.sampler = sampler

        def get_renderer(self):
            return self.sampler.get_renderer()

        async def sample(self, model_input, n, params):
            response = await self.sampler.sample(model_input, n, params)
            prompts.append((model_input.to_ints(), list(response.sequences[0].tokens)))
            return response

    watched = FrozenChatModel(Watched(frozen.sampler), defaults={"max_tokens": 6}, agent="helper")

    async def chat(task, model, auxiliary_models):
        await model([{"role": "user", "content": "hello"}])
        history = [{"role": "user", "content": "talk to me"}]
        for turn in range(3):
            reply = await auxiliary_models["helper"](history)
            history += [reply.message, {"role": "user", "content": f"and then {turn}?"}]
        return WorkflowOutput(reward=1.0)

    episodes = asyncio.run(
        run_episodes(
            as_episode_fn(chat),
            [{"task_id": "0"}],
            lambda: TunerHandle(policies={"policy": policy_and_helper[0]}, auxiliary_models={"helper": watched}),
            RunnerSettings(group_size=1),
        )
    )
    assert episodes[0].error is None and len(prompts) == 3
    for (prompt, reply), (next_prompt, _) in zip(prompts, prompts[1:], strict=False):
        assert next_prompt[: len(prompt) + len(reply)] == prompt + reply
    assert [timeline.agent for timeline in episodes[0].timelines] == ["policy"]  # still never trained


def test_an_openai_chat_model_keeps_one_client_across_calls(monkeypatch):
    import pickle
    from types import SimpleNamespace

    from sparring.rollout import OpenAIChatModel

    made = []

    class FakeClient:
        def __init__(self, **options):
            made.append(options)
            self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

        async def create(self, model, messages, **options):
            message = SimpleNamespace(model_dump=lambda exclude_none: {"role": "assistant", "content": "hi"})
            return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)

    monkeypatch.setattr(openai, "AsyncOpenAI", FakeClient)
    model = OpenAIChatModel(model="m", base_url="http://127.0.0.1:1/v1")

    async def three_calls():
        return [(await model([{"role": "user", "content": "hello"}])).content for _ in range(3)]

    assert asyncio.run(three_calls()) == ["hi"] * 3
    assert made == [{"base_url": "http://127.0.0.1:1/v1", "api_key": "EMPTY"}]
    assert asyncio.run(three_calls()) == ["hi"] * 3  # a new event loop: the old client's connections died with it
    assert len(made) == 2
    shipped = pickle.loads(pickle.dumps(model))  # to a worker, without its client
    assert "_client_on_loop" not in vars(shipped) and shipped.base_url == model.base_url
