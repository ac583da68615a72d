"""Requests the OpenAI-compatible endpoint refuses, on the tiny model: bad fields get an OpenAI-shaped error naming
the field, malformed JSON and a wrong API key are 4xx; and `sparring serve`'s app answers on its base model."""

import asyncio

import openai
import pytest
from fastapi import FastAPI
from openai_endpoint import TOOLS, ScriptedToolCaller, in_process, serve_tiny

from sparring import (
    ServiceClient,
)
from sparring.server.openai.routes import openai_router


@pytest.fixture(scope="module")
def served_app(tiny_model_dir, tmp_path_factory):
    return serve_tiny(tiny_model_dir, ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt")))


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
