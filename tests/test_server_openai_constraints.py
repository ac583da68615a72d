"""Constrained replies over the OpenAI SDK, on the tiny model: response_format and vLLM's guided_* spellings, forced
tool calls held to their schema (strict or not, cut or whole), and two constraints in one request refused."""

import asyncio
import json

import openai
import pytest
from openai_endpoint import PLAYERS, VOTE_SCHEMA, in_process, serve_tiny

from sparring import (
    ServiceClient,
)


@pytest.fixture(scope="module")
def served_app(tiny_model_dir, tmp_path_factory):
    return serve_tiny(tiny_model_dir, ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt")))


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
