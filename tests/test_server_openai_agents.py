"""Agents on the OpenAI-compatible endpoint inside episodes, on the tiny model: agents on the `openai` SDK and on raw
HTTP train like built-in ones through a loopback server, the in-process client's datums mask prompts, episode
keys are scoped to their episode and expire with it, and forced or guided calls are recorded as trained."""

import asyncio

import openai
import pytest
from loopback_training import train_two_steps
from openai_endpoint import (
    FOLLOW_UP,
    PLAYERS,
    TOOL_RESULT,
    TOOLS,
    converse,
    converse_with_raw_http,
    converse_with_sdk,
    http,
    policy_and_frozen_helper,
    run,
)

from sparring import (
    ServiceClient,
    TunerHandle,
    Workflow,
    WorkflowOutput,
)
from sparring.algorithms import build_datums
from sparring.logging.rollouts import sampled_spans
from sparring.server.openai.episode_keys import EPISODE_KEY_PREFIX
from sparring.server.openai.episode_server import IN_PROCESS_BASE_URL, episode_server


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    return policy_and_frozen_helper(tiny_model_dir, ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt")))


CAPTURED: dict[str, list[list[float]]] = {"sdk": [], "raw": []}


class HttpAgents(Workflow):
    trainable_targets = None

    async def execute(self, task, tuner):
        sdk = tuner.as_base_url_api_key("sdk")
        raw_url, raw_key = tuner.as_base_url_api_key("raw")
        assert sdk.base_url.startswith("http://127.0.0.1:") and sdk.model == "sdk"
        results = await asyncio.gather(
            converse_with_sdk(sdk.base_url, sdk.api_key), converse_with_raw_http(raw_url, raw_key)
        )
        for agent, calls in zip(("sdk", "raw"), results, strict=True):
            CAPTURED[agent] += calls
        return WorkflowOutput(
            reward={agent: float(calls[0][0] > -4.0) for agent, calls in zip(("sdk", "raw"), results, strict=True)}
        )


def test_sdk_and_raw_http_agents_train_through_a_loopback_server(tiny_model_dir, tmp_path):
    rows = train_two_steps(HttpAgents, tiny_model_dir, tmp_path / "run", ["a", "b"])
    assert sorted(row["agent"] for row in rows) == ["raw"] * 8 + ["sdk"] * 8
    spans_seen = {"sdk": [], "raw": []}
    for row in rows:
        assert row["num_calls"] == 2  # the second request continued the first reply's exact tokens: one timeline
        spans = sampled_spans(row["loss_mask"])
        assert len(spans) == 2
        masked_text = "".join(row["completions"])
        assert (
            TOOL_RESULT in row["text"] and FOLLOW_UP in row["text"]
        )  # the tool result and the user turn are in the sequence...
        assert TOOL_RESULT not in masked_text and FOLLOW_UP not in masked_text  # ...but not trained on
        assert spans[0][0] > 0 and spans[1][0] > spans[0][1]  # prompt before the first reply, tool + user turns between
        for start, end in spans:
            spans_seen[row["agent"]].append(row["logprobs"][start:end])
        assert row["advantage"] is not None
    for agent, calls in CAPTURED.items():
        # What the API returned (the end-of-turn token aside) is exactly what was trained on.
        assert len(calls) == len(spans_seen[agent]) == 16  # 8 episodes, 2 calls each
        for call in calls:
            assert any(span[: len(call)] == call and len(span) - len(call) <= 1 for span in spans_seen[agent])


def test_in_process_client_is_a_real_async_openai_and_its_datums_mask_prompts(models):
    class InProcess(Workflow):
        trainable_targets = ["learner"]

        async def execute(self, task, tuner):
            client = tuner.as_openai_client("carol", target_tag="learner")
            helper = tuner.as_openai_client("dave", target_tag="other", debug_model="helper")
            assert isinstance(client, openai.AsyncOpenAI) and str(client.base_url).startswith(IN_PROCESS_BASE_URL)

            async def send(messages):
                completion = await client.chat.completions.create(
                    model="x", messages=messages, tools=TOOLS, max_tokens=4, logprobs=True
                )
                return completion.choices[0].model_dump(exclude_none=True)

            await converse(send)
            await helper.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
            return WorkflowOutput(reward=1.0)

    (episode,) = run(InProcess, models)
    assert episode.error is None
    assert [(t.agent, t.num_calls) for t in episode.timelines] == [("carol", 2)]
    assert episode.roles == {"carol": "learner", "dave": "other"} and [
        t["trainable"] for t in episode.transcripts["dave"]
    ] == [False]
    (timeline,) = episode.timelines
    (datum,) = build_datums([episode], {(0, "carol"): 1.0})["policy"]
    advantages = datum.loss_fn_inputs["advantages"].tolist()
    assert advantages == [float(m) for m in timeline.loss_mask[1:]]
    renderer = models[0].renderer
    unmasked = renderer.decode([t for t, m in zip(timeline.tokens, timeline.loss_mask, strict=True) if not m])
    masked = renderer.decode([t for t, m in zip(timeline.tokens, timeline.loss_mask, strict=True) if m])
    assert TOOL_RESULT in unmasked and FOLLOW_UP in unmasked and "lookup" in unmasked
    assert TOOL_RESULT not in masked and FOLLOW_UP not in masked


def test_episode_keys_are_scoped_to_their_episode_and_expire(models):
    keys: dict[int, str] = {}

    class Leaky(Workflow):
        async def execute(self, task, tuner):
            base_url, api_key = tuner.as_base_url_api_key("agent")
            index = len(keys)
            keys[index] = api_key
            while len(keys) < 2:
                await asyncio.sleep(0.01)
            if index == 1:  # the second episode uses the first one's key: the call lands in the first episode
                await converse_with_sdk(base_url, keys[0])
            else:
                while len(keys) < 3:
                    await asyncio.sleep(0.01)
            keys[len(keys)] = "done"
            return WorkflowOutput(reward=1.0)

    first, second = run(Leaky, models, group_size=2)
    assert first.error is None and second.error is None
    assert [(t.agent, t.num_calls) for t in first.timelines] == [("agent", 2)]
    assert second.timelines == [] and second.num_calls == 0

    async def after_the_episodes():
        base_url = episode_server().serve()
        async with http.AsyncClient(timeout=30) as client:
            body = {"model": "agent", "messages": [{"role": "user", "content": "hi"}]}
            statuses = {}
            for name, key in {
                "expired": keys[0],
                "forged": EPISODE_KEY_PREFIX + "x" * 43,
                "not an episode key": "sk-anything",
            }.items():
                response = await client.post(
                    f"{base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
                )
                statuses[name] = (response.status_code, response.json()["error"]["type"])
            return statuses

    assert asyncio.run(after_the_episodes()) == {
        name: (401, "authentication_error") for name in ("expired", "forged", "not an episode key")
    }
    assert len(episode_server().keys) == 0  # every episode has ended, so every key was revoked


def test_a_tuner_endpoint_outside_an_episode_is_an_error(models):
    tuner = TunerHandle(policies={"policy": models[0]})
    with pytest.raises(RuntimeError, match="inside an episode"):
        tuner.as_base_url_api_key("agent")


def test_a_forced_tool_call_over_http_merges_with_its_result(models):
    class Forced(Workflow):
        async def execute(self, task, tuner):
            client = tuner.as_openai_client("carol")
            messages = [{"role": "user", "content": "Say a word."}]
            first = await client.chat.completions.create(
                model="x", messages=messages, tools=TOOLS, tool_choice="required", max_tokens=4
            )
            call = first.choices[0].message.tool_calls[0]
            assert call.function.name == "lookup"  # one tool: "required" forces it
            messages += [
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT},
            ]
            await client.chat.completions.create(model="x", messages=messages, tools=TOOLS, max_tokens=4)
            return WorkflowOutput(reward=1.0)

    (episode,) = run(Forced, models)
    assert episode.error is None
    (timeline,) = episode.timelines
    assert timeline.num_calls == 2
    renderer = models[0].renderer
    unmasked = renderer.decode([t for t, m in zip(timeline.tokens, timeline.loss_mask, strict=True) if not m])
    assert renderer.tool_call_prefill("lookup") in unmasked and TOOL_RESULT in unmasked
    assert sum(timeline.loss_mask) == sum(entry["completion_tokens"] for entry in episode.transcripts["carol"])


def test_a_trained_agent_on_the_openai_sdk_records_its_guided_choices(models):
    class Voter(Workflow):
        trainable_targets = ["voter"]

        async def execute(self, task, tuner):
            client = tuner.as_openai_client("erin", target_tag="voter")
            for _ in range(2):
                completion = await client.chat.completions.create(
                    model="x",
                    messages=[{"role": "user", "content": "Vote."}],
                    max_tokens=12,
                    extra_body={"guided_choice": PLAYERS},
                )
                assert completion.choices[0].message.content in PLAYERS
            return WorkflowOutput(reward=1.0)

    (episode,) = run(Voter, models)
    assert episode.error is None, episode.error
    for timeline in episode.timelines:
        constrained = [bool(allowed) for allowed in timeline.allowed_tokens]
        assert constrained == [bool(mask) for mask in timeline.loss_mask], (
            "every sampled token of a guided call is constrained, no prompt token is"
        )
