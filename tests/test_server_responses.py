"""The Responses API (`POST /v1/responses`) on the tiny model, through the installed `openai` SDK: text and item
inputs, instructions, function tools and their outputs, json_schema formats, streaming (`responses.stream` and
`create(stream=True)`), on `sparring serve`'s app and the per-episode endpoint, and a 2-step training run whose
agent speaks only the Responses API: its calls merge into one timeline per agent, like chat completions'."""

import asyncio
import json
import random

import openai
import pytest
from fastapi import FastAPI
from loopback_training import train_two_steps

from sparring import (
    ServiceClient,
    Workflow,
    WorkflowOutput,
)
from sparring.logging.rollouts import sampled_spans
from sparring.rollout import EpisodeRecorder, FrozenChatModel, merge_calls
from sparring.server.openai.episode_keys import EpisodeKeys
from sparring.server.openai.episode_server import openai_http_library
from sparring.server.openai.routes import openai_router
from sparring.server.openai.served_models import ServedModels

http = openai_http_library()
WORD = {
    "type": "object",
    "properties": {"word": {"enum": ["cat", "dog"]}},
    "required": ["word"],
    "additionalProperties": False,
}
TOOL = {"type": "function", "name": "lookup", "description": "Look a word up.", "parameters": WORD}
TOOL_RESULT = "TOOLRESULT"
FOLLOW_UP = "FOLLOWUP"
VOTE_SCHEMA = {
    "type": "object",
    "properties": {"vote": {"enum": ["a", "b"]}, "sure": {"type": "boolean"}},
    "required": ["vote", "sure"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def served_app(tiny_model_dir, tmp_path_factory):
    service = ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt"))
    frozen = FrozenChatModel(service.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 8})
    app = FastAPI()
    app.include_router(openai_router(ServedModels({"tiny": frozen})))
    return app


def sdk(app) -> openai.AsyncOpenAI:
    transport = http.AsyncClient(transport=http.ASGITransport(app=app), base_url="http://test")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=transport, max_retries=0)


def test_text_input_and_instructions_answer_with_a_message(served_app):
    async def ask():
        async with sdk(served_app) as client:
            return await client.responses.create(
                model="tiny", input="Hello", instructions="Be brief.", max_output_tokens=5, temperature=0
            )

    response = asyncio.run(ask())
    assert response.object == "response" and response.status in ("completed", "incomplete")
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant" and response.output_text == item.content[0].text
    assert (
        0 < response.usage.output_tokens <= 5
        and response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    )
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens"


def test_item_input_with_a_function_call_and_its_output_then_a_forced_call(served_app):
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Look up a word."}]},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"word": "x"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": TOOL_RESULT},
        {"role": "user", "content": FOLLOW_UP},
    ]

    async def ask():
        async with sdk(served_app) as client:
            free = await client.responses.create(
                model="tiny", input=items, tools=[TOOL], max_output_tokens=6, temperature=0
            )
            forced = await client.responses.create(
                model="tiny",
                input=items,
                tools=[TOOL],
                tool_choice={"type": "function", "name": "lookup"},
                max_output_tokens=24,
            )
            return free, forced

    free, forced = asyncio.run(ask())
    assert free.output and free.usage.input_tokens > 0
    call = next(item for item in forced.output if item.type == "function_call")
    assert call.name == "lookup" and call.call_id.startswith("call_") and "</tool" not in call.arguments
    assert forced.usage.input_tokens > free.usage.input_tokens  # the forced call's prefill is prompt


def test_a_json_schema_text_format_constrains_the_reply(served_app):
    async def ask():
        async with sdk(served_app) as client:
            text = {"format": {"type": "json_schema", "name": "vote", "schema": VOTE_SCHEMA, "strict": True}}
            return await asyncio.gather(
                *(
                    client.responses.create(
                        model="tiny",
                        input="Vote.",
                        text=text,
                        max_output_tokens=48,
                        temperature=1.5,
                        extra_body={"seed": s},
                    )
                    for s in range(4)
                )
            )

    for response in asyncio.run(ask()):
        vote = json.loads(response.output_text)
        assert response.status == "completed" and vote["vote"] in ("a", "b") and isinstance(vote["sure"], bool)


def test_streaming_gives_the_sdk_the_events_it_expects_and_the_same_reply(served_app):
    request = dict(model="tiny", input="Tell me a story.", max_output_tokens=8, temperature=1.0, extra_body={"seed": 3})

    async def ask():
        async with sdk(served_app) as client:
            whole = await client.responses.create(**request)
            kinds, deltas = [], []
            async for event in await client.responses.create(**request, stream=True):
                kinds.append(event.type)
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
            async with client.responses.stream(**request) as stream:
                streamed_text = [event.delta async for event in stream if event.type == "response.output_text.delta"]
                final = await stream.get_final_response() if kinds[-1] == "response.completed" else None
            return whole, kinds, deltas, streamed_text, final

    whole, kinds, deltas, streamed_text, final = asyncio.run(ask())
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == ("response.incomplete" if whole.status == "incomplete" else "response.completed")
    assert "response.output_text.done" in kinds and "response.output_item.done" in kinds
    assert "".join(deltas) == "".join(streamed_text) == whole.output_text
    if final is not None:
        assert final.output_text == whole.output_text


def test_a_streamed_function_call_comes_back_whole(served_app):
    async def ask():
        async with sdk(served_app) as client:
            async with client.responses.stream(
                model="tiny", input="Look it up.", tools=[TOOL], tool_choice="required", max_output_tokens=32
            ) as stream:
                arguments = "".join(
                    [event.delta async for event in stream if event.type == "response.function_call_arguments.delta"]
                )
                return arguments, await stream.get_final_response()

    arguments, final = asyncio.run(ask())
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.name == "lookup" and call.arguments == arguments
    assert json.loads(arguments)["word"] in ("cat", "dog")  # forced: held to the tool's schema though it is not strict


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": "hi"}, "model"),
        ({"model": "tiny", "input": []}, "input"),
        ({"model": "tiny", "input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"model": "tiny", "input": "hi", "conversation": "conv_1"}, "conversation"),
        ({"model": "tiny", "input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"model": "tiny", "input": [{"type": "function_call", "name": "f"}]}, "input"),
        ({"model": "tiny", "input": "hi", "text": {"format": {"type": "json_schema"}}}, "text"),
        ({"model": "tiny", "input": "hi", "tool_choice": "required"}, "tool_choice"),
        ({"model": "tiny", "input": "hi", "best_of": 2}, "best_of"),
    ],
)
def test_bad_responses_requests_get_an_openai_error_naming_the_field(served_app, body, param):
    async def post():
        async with http.AsyncClient(transport=http.ASGITransport(app=served_app), base_url="http://test") as client:
            return await client.post("/v1/responses", json=body)

    response = asyncio.run(post())
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(param)


def test_previous_response_id_on_sparring_serve_says_to_send_the_history_as_input_items(served_app):
    async def ask():
        async with sdk(served_app) as client:
            first = await client.responses.create(model="tiny", input="Hello", max_output_tokens=3)
            with pytest.raises(openai.BadRequestError) as refused:
                await client.responses.create(
                    model="tiny", input="And?", previous_response_id=first.id, max_output_tokens=3
                )
            return first, refused.value

    first, refused = asyncio.run(ask())
    assert first.store is False  # sparring serve keeps nothing
    error = refused.body
    assert refused.status_code == 400 and error["param"] == "previous_response_id"
    assert (
        "keeps no responses" in error["message"] and "send the conversation so far as input items" in error["message"]
    )


def test_previous_response_id_within_an_episode_records_the_timeline_the_whole_history_would(policy_and_helper):
    """Two episodes, same seeds: one continues with previous_response_id, the other resends every item."""
    policy, _ = policy_and_helper
    episodes = EpisodeKeys()
    app = FastAPI()
    app.include_router(openai_router(None, episodes))
    chained, resent = EpisodeRecorder(), EpisodeRecorder()
    keys = {id(chained): episodes.issue(policy, chained), id(resent): episodes.issue(policy, resent)}

    def client_of(recorder) -> openai.AsyncOpenAI:
        transport = http.AsyncClient(transport=http.ASGITransport(app=app), base_url="http://test")
        return openai.AsyncOpenAI(
            base_url="http://test/v1", api_key=keys[id(recorder)], http_client=transport, max_retries=0
        )

    opening = [{"role": "user", "content": "Say a word."}]
    forced = dict(model="policy", tools=[TOOL], tool_choice="required", max_output_tokens=24, extra_body={"seed": 1})
    then = dict(model="policy", tools=[TOOL], max_output_tokens=5, extra_body={"seed": 2})

    def answer(first) -> list[dict]:
        call = next(item for item in first.output if item.type == "function_call")
        return [
            {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT},
            {"role": "user", "content": FOLLOW_UP},
        ]

    async def converse():
        async with client_of(chained) as client:
            first = await client.responses.create(input=opening, **forced)
            second = await client.responses.create(input=answer(first), previous_response_id=first.id, **then)
            third = await client.responses.create(input="Once more.", previous_response_id=second.id, **then)
            with pytest.raises(openai.BadRequestError) as unknown:
                await client.responses.create(input="hi", previous_response_id="resp_unknown", **then)
        async with client_of(resent) as client:
            again = await client.responses.create(input=opening, **forced)
            history = [*opening, *[item.model_dump(exclude_none=True) for item in again.output], *answer(again)]
            second_whole = await client.responses.create(input=history, **then)
            history += [
                *[item.model_dump(exclude_none=True) for item in second_whole.output],
                {"role": "user", "content": "Once more."},
            ]
            await client.responses.create(input=history, **then)
        return first, second, third, unknown.value

    first, second, third, unknown = asyncio.run(converse())
    assert first.store and second.previous_response_id == first.id and third.previous_response_id == second.id
    assert (
        unknown.status_code == 400
        and unknown.body["param"] == "previous_response_id"
        and "resp_unknown" in unknown.body["message"]
    )
    (chained_timeline,), (resent_timeline,) = merge_calls(chained.calls), merge_calls(resent.calls)
    assert chained_timeline.num_calls == resent_timeline.num_calls == 3
    assert chained_timeline.tokens == resent_timeline.tokens and chained_timeline.loss_mask == resent_timeline.loss_mask
    assert (
        second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    )  # the kept history was prompt
    chained.close()
    assert len(episodes) == 1  # the key, and the responses kept with it, go with its episode


def test_a_json_schema_format_leaves_a_forced_tool_call_to_its_tool(served_app):
    """The Agents SDK sends an agent's output_type as text.format with every call, forced ones too."""
    text = {"format": {"type": "json_schema", "name": "vote", "schema": VOTE_SCHEMA, "strict": True}}

    async def ask():
        async with sdk(served_app) as client:
            return await client.responses.create(
                model="tiny", input="Look it up.", tools=[TOOL], tool_choice="required", text=text, max_output_tokens=32
            )

    response = asyncio.run(ask())
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert json.loads(call.arguments)["word"] in ("cat", "dog")


def test_sparring_serve_app_answers_the_responses_api(tiny_model_dir, tmp_path):
    from sparring.server import create_app

    app = create_app(str(tiny_model_dir), base_dir=tmp_path)

    async def ask():
        async with sdk(app) as client:
            return await client.responses.create(model=str(tiny_model_dir), input="hi", max_output_tokens=3)

    response = asyncio.run(ask())
    assert response.output[0].type == "message" and 0 < response.usage.output_tokens <= 3


CAPTURED: dict[str, int] = {"calls": 0}


async def converse_over_responses(client: openai.AsyncOpenAI, model: str) -> None:
    """A forced function call, its output sent back with the call, then a user turn: two Responses calls."""
    items: list = [{"role": "user", "content": "Say a word."}]
    first = await client.responses.create(
        model=model, input=items, tools=[TOOL], tool_choice="required", max_output_tokens=24
    )
    items += [item.model_dump(exclude_none=True) for item in first.output]
    call = next(item for item in first.output if item.type == "function_call")
    items += [
        {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT},
        {"role": "user", "content": FOLLOW_UP},
    ]
    second = await client.responses.create(model=model, input=items, tools=[TOOL], max_output_tokens=5)
    assert second.output
    CAPTURED["calls"] += 2


class ResponsesAgents(Workflow):
    trainable_targets = None

    async def execute(self, task, tuner):
        endpoint = tuner.as_base_url_api_key("http")
        async with openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0) as over_http:
            await converse_over_responses(over_http, endpoint.model)
        await converse_over_responses(tuner.as_openai_client("inproc"), "inproc")
        return WorkflowOutput(reward={"http": random.random(), "inproc": random.random()})  # any spread trains


def test_agents_on_the_responses_api_train_two_steps_with_merged_timelines(tiny_model_dir, tmp_path):
    rows = train_two_steps(ResponsesAgents, tiny_model_dir, tmp_path / "run", ["a", "bb"])
    assert sorted(row["agent"] for row in rows) == ["http"] * 8 + ["inproc"] * 8
    for row in rows:
        assert (
            row["num_calls"] == 2
        )  # the second call resent the first reply's items: one timeline, like chat completions
        assert len(sampled_spans(row["loss_mask"])) == 2 and row["advantage"] is not None
        masked_text = "".join(row["completions"])
        assert TOOL_RESULT in row["text"] and FOLLOW_UP in row["text"] and TOOL_RESULT not in masked_text
    assert CAPTURED["calls"] == 32
