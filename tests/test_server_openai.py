"""The OpenAI-compatible endpoint on the tiny model: agents on the `openai` SDK and on raw HTTP train like
built-in ones, streaming matches non-streaming, tool calls parse, bad requests get OpenAI-shaped 4xx errors,
and episode keys are scoped to their episode and expire with it."""

import asyncio
import json

import openai
import pytest
from fastapi import FastAPI
from loopback_training import train_two_steps

from sparring import (
    ServiceClient,
    TunerHandle,
    Workflow,
    WorkflowOutput,
)
from sparring.algorithms import build_datums
from sparring.logging.rollouts import sampled_spans
from sparring.rollout import (
    ChatModel,
    ChatResponse,
    FrozenChatModel,
    PolicyChatModel,
    RunnerSettings,
    as_episode_fn,
    run_episodes,
)
from sparring.server.openai.episode_keys import EPISODE_KEY_PREFIX
from sparring.server.openai.episode_server import IN_PROCESS_BASE_URL, episode_server, openai_http_library
from sparring.server.openai.routes import openai_router
from sparring.server.openai.served_models import ServedModels

http = openai_http_library()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]
TOOL_RESULT = "TOOLRESULT"
FOLLOW_UP = "FOLLOWUP"


@pytest.fixture(scope="module")
def service(tiny_model_dir, tmp_path_factory):
    return ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def served_app(tiny_model_dir, service):
    """An app serving the tiny base model (untrained) and a scripted tool-calling model."""
    frozen = FrozenChatModel(service.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 8})
    served = ServedModels({"tiny": frozen, "scripted": ScriptedToolCaller(frozen.renderer)})
    app = FastAPI()
    app.include_router(openai_router(served))
    return app


def in_process(app, **options):
    return http.AsyncClient(transport=http.ASGITransport(app=app), base_url="http://test", **options)


class ScriptedToolCaller(ChatModel):
    """Replies with a hermes-style tool call, parsed by the real renderer."""

    def __init__(self, renderer):
        self._renderer = renderer

    @property
    def renderer(self):
        return self._renderer

    async def __call__(self, messages, tools=None, **sampling):
        text = 'Let me check.\n<tool_call>\n{"name": "lookup", "arguments": {"word": "sparring"}}\n</tool_call>'
        tokens = [*self._renderer.encode_text(text), *self._renderer.stop_token_ids[:1]]
        return ChatResponse(
            message=self._renderer.parse_response(tokens), tokens=tokens, logprobs=[-0.5] * len(tokens), prompt_tokens=3
        )


async def converse(send) -> list[list[float]]:
    """Two turns with a tool result and a user message in between; the sampler logprobs of both replies."""
    messages = [{"role": "user", "content": "Say a word."}]
    first = await send(messages)
    messages += [
        first["message"],
        {"role": "tool", "tool_call_id": "call_0", "content": TOOL_RESULT},
        {"role": "user", "content": FOLLOW_UP},
    ]
    second = await send(messages)
    return [[entry["logprob"] for entry in reply["logprobs"]["content"]] for reply in (first, second)]


async def converse_with_sdk(base_url: str, api_key: str, model: str = "agent") -> list[list[float]]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:

        async def send(messages):
            completion = await client.chat.completions.create(
                model=model, messages=messages, tools=TOOLS, max_tokens=5, logprobs=True
            )
            return completion.choices[0].model_dump(exclude_none=True)

        return await converse(send)


async def converse_with_raw_http(base_url: str, api_key: str) -> list[list[float]]:
    async with http.AsyncClient(headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as client:

        async def send(messages):
            response = await client.post(
                f"{base_url}/chat/completions",
                json={"model": "agent", "messages": messages, "tools": TOOLS, "max_tokens": 5, "logprobs": True},
            )
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]

        return await converse(send)


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


@pytest.fixture(scope="module")
def models(tiny_model_dir, service):
    client = service.create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    policy = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults={"max_tokens": 5})
    frozen = FrozenChatModel(
        service.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 5}, agent="helper"
    )
    return policy, frozen


def run(workflow, models, group_size=1):
    policy, frozen = models
    make_tuner = lambda: TunerHandle(policies={"policy": policy}, auxiliary_models={"helper": frozen})  # noqa: E731
    return asyncio.run(
        run_episodes(
            as_episode_fn(workflow),
            [{"task_id": "0"}],
            make_tuner,
            RunnerSettings(group_size=group_size, episode_timeout_s=60),
        )
    )


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


def test_streaming_returns_the_same_replies_as_non_streaming(served_app):
    async def both():
        async with openai.AsyncOpenAI(
            base_url="http://test/v1", api_key="unused", http_client=in_process(served_app), max_retries=0
        ) as client:
            request = dict(
                model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=8, seed=11, n=2, logprobs=True
            )
            whole = await client.chat.completions.create(**request)
            texts, logprobs, finishes, usage = ["", ""], [[], []], [None, None], None
            async for chunk in await client.chat.completions.create(
                **request, stream=True, stream_options={"include_usage": True}
            ):
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    texts[choice.index] += choice.delta.content or ""
                    logprobs[choice.index] += [
                        entry.logprob for entry in (choice.logprobs.content if choice.logprobs else None) or []
                    ]
                    finishes[choice.index] = choice.finish_reason or finishes[choice.index]
            return whole, texts, logprobs, finishes, usage

    whole, texts, logprobs, finishes, usage = asyncio.run(both())
    assert texts == [choice.message.content for choice in whole.choices]
    # the stream's prompt is read from the prefix cache the whole reply filled: equal up to float rounding
    assert logprobs == [
        pytest.approx([entry.logprob for entry in choice.logprobs.content], abs=1e-5) for choice in whole.choices
    ]
    assert finishes == [choice.finish_reason for choice in whole.choices]
    assert (
        usage.completion_tokens == whole.usage.completion_tokens
        and usage.prompt_tokens == whole.usage.prompt_tokens > 0
    )
    assert texts[0] != texts[1] or logprobs[0] != logprobs[1]  # n=2 samples two different replies


def test_tool_calls_come_back_parsed_streamed_or_not(served_app):
    async def both():
        async with openai.AsyncOpenAI(
            base_url="http://test/v1", api_key="unused", http_client=in_process(served_app), max_retries=0
        ) as client:
            request = dict(model="scripted", messages=[{"role": "user", "content": "look it up"}], tools=TOOLS)
            whole = await client.chat.completions.create(**request)
            streamed_calls, content = {}, ""
            async for chunk in await client.chat.completions.create(**request, stream=True):
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        streamed_calls.setdefault(call.index, {"name": "", "arguments": ""})
                        streamed_calls[call.index]["name"] += call.function.name or ""
                        streamed_calls[call.index]["arguments"] += call.function.arguments or ""
            return whole, streamed_calls, content

    whole, streamed_calls, content = asyncio.run(both())
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == content == "Let me check."
    (call,) = choice.message.tool_calls
    assert (
        call.function.name == "lookup"
        and json.loads(call.function.arguments) == {"word": "sparring"}
        and call.id.startswith("call_")
    )
    assert streamed_calls == {0: {"name": "lookup", "arguments": call.function.arguments}}


TWO_TOOLS = [
    *TOOLS,
    {
        "type": "function",
        "function": {"name": "define", "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}},
    },
]


def test_every_tool_choice_streams_what_it_returns_whole(served_app):
    """The tiny random model under each tool_choice: a forced call is a call of the forced tool, streamed or not."""

    async def ask(tool_choice):
        async with openai.AsyncOpenAI(
            base_url="http://test/v1", api_key="unused", http_client=in_process(served_app), max_retries=0
        ) as client:
            request = dict(
                model="tiny",
                messages=[{"role": "user", "content": "look it up"}],
                tools=TWO_TOOLS,
                tool_choice=tool_choice,
                max_tokens=8,
                seed=5,
                logprobs=True,
            )
            whole = await client.chat.completions.create(**request)
            content, calls, logprobs, finish = "", {}, [], None
            async for chunk in await client.chat.completions.create(**request, stream=True):
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    logprobs += [
                        entry.logprob for entry in (choice.logprobs.content if choice.logprobs else None) or []
                    ]
                    finish = choice.finish_reason or finish
                    for call in choice.delta.tool_calls or []:
                        calls.setdefault(call.index, ["", ""])
                        calls[call.index][0] += call.function.name or ""
                        calls[call.index][1] += call.function.arguments or ""
            return whole, content, calls, logprobs, finish

    forced = {"type": "function", "function": {"name": "define"}}
    results = {str(choice): asyncio.run(ask(choice)) for choice in ("auto", "none", "required", forced)}
    for whole, content, calls, logprobs, finish in results.values():
        message = whole.choices[0].message
        assert content == (message.content or "") and finish == whole.choices[0].finish_reason
        assert calls == {
            index: [call.function.name, call.function.arguments] for index, call in enumerate(message.tool_calls or [])
        }
        # the stream's prompt is read from the prefix cache the whole reply filled: equal up to float rounding
        assert logprobs == pytest.approx([entry.logprob for entry in whole.choices[0].logprobs.content], abs=1e-5)
    whole, *_ = results[str(forced)]
    assert (
        whole.choices[0].finish_reason in ("tool_calls", "length")
        and whole.choices[0].message.tool_calls[0].function.name == "define"
    )
    assert not results["none"][0].choices[0].message.tool_calls
    prompt = {name: result[0].usage.prompt_tokens for name, result in results.items()}
    assert (
        prompt["auto"] == prompt["none"] < prompt["required"] < prompt[str(forced)]
    )  # tools always offered; the prefill is prompt


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


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "tiny", "messages": []}, "messages"),
        ({"model": "tiny", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"model": "tiny", "messages": [{"role": "user"}]}, "messages[0]"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": 3}, "temperature"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 0}, "n"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 2},
            "top_logprobs",
        ),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "tool_choice"),
        (
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "nope"}},
            },
            "tool_choice",
        ),
        (
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": TOOLS,
                "tool_choice": "sometimes",
            },
            "tool_choice",
        ),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "best_of": 2}, "best_of"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}},
            "response_format",
        ),
        (
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema"},
            },
            "response_format",
        ),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "guided_choice": []}, "guided_choice"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "guided_json": "[1, 2]"}, "guided_json"),
        ({"model": "nobody", "messages": [{"role": "user", "content": "hi"}]}, "model"),
    ],
)
def test_bad_requests_get_an_openai_error_naming_the_field(served_app, body, param):
    async def post():
        async with in_process(served_app) as client:
            return await client.post("/v1/chat/completions", json=body)

    response = asyncio.run(post())
    assert response.status_code == (404 if body.get("model") == "nobody" else 400)
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"].startswith(param)


def test_malformed_json_and_a_wrong_api_key_are_4xx(tiny_model_dir, served_app):
    guarded = FastAPI()
    guarded.include_router(openai_router({"tiny": ScriptedToolCaller(None)}, api_key="secret"))

    async def post():
        async with in_process(served_app) as client:
            malformed = await client.post(
                "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
            )
            too_deep = await client.post(
                "/v1/chat/completions", content=b"[" * 100_000, headers={"content-type": "application/json"}
            )
        async with in_process(guarded) as client:
            wrong_key = await client.post(
                "/v1/chat/completions",
                json={"model": "tiny", "messages": []},
                headers={"Authorization": "Bearer guess"},
            )
            listed = await client.get("/v1/models", headers={"Authorization": "Bearer secret"})
        return malformed, too_deep, wrong_key, listed

    malformed, too_deep, wrong_key, listed = asyncio.run(post())
    assert malformed.status_code == 400 and "not valid JSON" in malformed.json()["error"]["message"]
    assert too_deep.status_code == 400 and "nested too deeply" in too_deep.json()["error"]["message"]
    assert wrong_key.status_code == 401 and wrong_key.json()["error"]["type"] == "authentication_error"
    assert listed.json()["data"] == [{"id": "tiny", "object": "model", "created": 0, "owned_by": "sparring"}]


def test_sparring_serve_app_answers_openai_chat_on_its_base_model(tiny_model_dir, tmp_path):
    from sparring.server import create_app

    app = create_app(str(tiny_model_dir), base_dir=tmp_path)

    async def calls():
        async with openai.AsyncOpenAI(
            base_url="http://test/v1", api_key="unused", http_client=in_process(app), max_retries=0
        ) as client:
            listed = [model.id async for model in client.models.list()]
            completion = await client.chat.completions.create(
                model=str(tiny_model_dir), messages=[{"role": "user", "content": "hi"}], max_tokens=3
            )
            with pytest.raises(openai.NotFoundError, match="not served here"):
                await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        return listed, completion

    listed, completion = asyncio.run(calls())
    assert listed == [str(tiny_model_dir)]
    assert completion.choices[0].message.role == "assistant" and 0 < completion.usage.completion_tokens <= 3


PLAYERS = ["Player1", "Player2", "Player10"]
VOTE_SCHEMA = {
    "type": "object",
    "properties": {"vote": {"enum": PLAYERS}, "sure": {"type": "boolean"}},
    "required": ["vote", "sure"],
    "additionalProperties": False,
}


def test_response_format_and_vllm_guided_spellings_constrain_replies_over_the_openai_sdk(served_app):
    async def ask():
        async with openai.AsyncOpenAI(
            base_url="http://test/v1", api_key="unused", http_client=in_process(served_app), max_retries=0
        ) as client:
            request = dict(
                model="tiny", messages=[{"role": "user", "content": "Vote."}], max_tokens=48, n=4, temperature=1.5
            )
            return await asyncio.gather(
                client.chat.completions.create(
                    **request,
                    response_format={"type": "json_schema", "json_schema": {"name": "vote", "schema": VOTE_SCHEMA}},
                ),
                client.chat.completions.create(**request, response_format={"type": "json_object"}),
                client.chat.completions.create(**request, extra_body={"guided_choice": PLAYERS}),
                client.chat.completions.create(**request, extra_body={"guided_regex": "(yes|no)!"}),
                client.chat.completions.create(**request, extra_body={"guided_json": VOTE_SCHEMA}, stream=False),
            )

    schema_reply, object_reply, choice_reply, regex_reply, guided_json_reply = asyncio.run(ask())
    for completion in (schema_reply, guided_json_reply):
        for choice in completion.choices:
            vote = json.loads(choice.message.content)
            assert choice.finish_reason == "stop" and vote["vote"] in PLAYERS and isinstance(vote["sure"], bool)
    assert all(
        isinstance(json.loads(choice.message.content), dict)
        for choice in object_reply.choices
        if choice.finish_reason == "stop"
    )
    assert all(choice.message.content in PLAYERS for choice in choice_reply.choices)
    assert all(choice.message.content in ("yes!", "no!") for choice in regex_reply.choices)


def test_a_forced_strict_tool_call_over_the_openai_sdk_has_schema_valid_arguments(served_app):
    tool = {"type": "function", "function": {"name": "vote", "parameters": VOTE_SCHEMA, "strict": True}}

    async def ask():
        async with openai.AsyncOpenAI(
            base_url="http://test/v1", api_key="unused", http_client=in_process(served_app), max_retries=0
        ) as client:
            return await client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "Vote."}],
                max_tokens=48,
                n=4,
                temperature=1.5,
                tools=[tool],
                tool_choice="required",
            )

    for choice in asyncio.run(ask()).choices:
        (call,) = choice.message.tool_calls
        vote = json.loads(call.function.arguments)
        assert call.function.name == "vote" and vote["vote"] in PLAYERS and isinstance(vote["sure"], bool)


def test_two_constraints_in_one_request_are_a_400(served_app):
    async def post():
        async with in_process(served_app) as client:
            body = {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "guided_choice": ["a"],
                "guided_regex": "b",
            }
            return await client.post("/v1/chat/completions", json=body)

    response = asyncio.run(post())
    assert response.status_code == 400 and "at most one of" in response.json()["error"]["message"]


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


def test_a_forced_tool_call_without_strict_is_held_to_its_schema_and_a_cut_one_reports_length(served_app):
    tool = {
        "type": "function",
        "function": {"name": "vote", "parameters": VOTE_SCHEMA},
    }  # no strict, as LangChain's bind_tools
    named = {"type": "function", "function": {"name": "vote"}}

    async def ask():
        async with openai.AsyncOpenAI(
            base_url="http://test/v1", api_key="unused", http_client=in_process(served_app), max_retries=0
        ) as client:
            request = dict(
                model="tiny",
                messages=[{"role": "user", "content": "Vote."}],
                tools=[tool],
                tool_choice="required",
                temperature=1.5,
                seed=1,
            )
            whole = [
                client.chat.completions.create(**{**request, "tool_choice": choice, "seed": seed}, max_tokens=48)
                for seed in range(5)
                for choice in ("required", named)
            ]
            whole = await asyncio.gather(*whole)
            sizes = range(1, whole[2].usage.completion_tokens + 1)  # seed 1's call, cut at every length up to its own
            return whole, await asyncio.gather(
                *(client.chat.completions.create(**request, max_tokens=size) for size in sizes)
            )

    whole, cut = asyncio.run(ask())
    for completion in whole:  # 10/10 valid, strict or not
        (choice,) = completion.choices
        vote = json.loads(choice.message.tool_calls[0].function.arguments)
        assert choice.finish_reason == "tool_calls" and vote["vote"] in PLAYERS and isinstance(vote["sure"], bool)
    assert [completion.choices[0].finish_reason for completion in cut] == ["length"] * (len(cut) - 1) + ["tool_calls"]
    cut_in_closing = 0
    for completion in cut:
        (choice,) = completion.choices
        arguments = choice.message.tool_calls[0].function.arguments
        assert "</" not in arguments and "tool_call" not in arguments and not choice.message.content
        cut_in_closing += (
            choice.finish_reason == "length"
            and arguments == whole[2].choices[0].message.tool_calls[0].function.arguments
        )
    assert cut_in_closing >= 2  # cut after the arguments, inside `}\n</tool_call>`: the arguments whole, no markup
