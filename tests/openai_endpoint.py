"""What the OpenAI-endpoint tests (tests/test_server_openai_*.py) share, on the tiny model: the tool definitions,
an in-process HTTP client for an app, an app serving the untrained tiny model and a scripted tool caller, a
two-turn conversation with a tool result between its turns, and one task's episodes run with a policy and a frozen
helper."""

import asyncio

import openai
from fastapi import FastAPI

from sparring import ServiceClient, TunerHandle
from sparring.rollout import (
    ChatModel,
    ChatResponse,
    FrozenChatModel,
    PolicyChatModel,
    RunnerSettings,
    as_episode_fn,
    run_episodes,
)
from sparring.server.openai.episode_server import openai_http_library
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


def serve_tiny(tiny_model_dir, service: ServiceClient) -> FastAPI:
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


def policy_and_frozen_helper(tiny_model_dir, service: ServiceClient):
    """A trainable tiny policy and the frozen tiny base model as agent "helper", 5 tokens a reply."""
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


PLAYERS = ["Player1", "Player2", "Player10"]
VOTE_SCHEMA = {
    "type": "object",
    "properties": {"vote": {"enum": PLAYERS}, "sure": {"type": "boolean"}},
    "required": ["vote", "sure"],
    "additionalProperties": False,
}
