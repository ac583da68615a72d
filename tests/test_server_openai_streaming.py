"""Streaming on the OpenAI-compatible endpoint, on the tiny model: a stream returns the same replies as the whole
response, tool calls come back parsed streamed or not, under every tool_choice."""

import asyncio
import json

import openai
import pytest
from openai_endpoint import TOOLS, in_process, serve_tiny

from sparring import (
    ServiceClient,
)


@pytest.fixture(scope="module")
def served_app(tiny_model_dir, tmp_path_factory):
    return serve_tiny(tiny_model_dir, ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt")))


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
