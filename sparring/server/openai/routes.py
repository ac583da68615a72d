"""OpenAI-compatible chat: `/v1/models`, `/v1/chat/completions` and `/v1/responses` over sparring chat models.

`openai_router(models, episodes, api_key)` answers two kinds of caller:

- with an **episode key** (from `tuner.as_base_url_api_key(...)` or
  `tuner.as_openai_client(...)`), the key alone picks the agent's routed
  chat model and its episode's recorder, and the call is recorded there
  explicitly (an HTTP request runs in the server's task, not the episode's,
  so the recorder's context variable is not set): a trainable agent behind
  any framework is trained exactly like a built-in one — same tokens, same
  sampler logprobs, same timeline merging;
- otherwise the request's `model` names one of the `ServedModels` (base
  model, saved adapter, registered live policy), served untrained; when the
  router was given an `api_key`, the bearer token must match it.

Requests are validated (`schema`): bad input is a 4xx in OpenAI's
error shape naming the field, never a 500 trace; with `ServerLimits`, one
that asks for more than the model's context or the server's bounds is
refused before sampling starts, and a prompt too long for the context
before it is tokenized whole (`PromptBound`). A client that disconnects before its reply
is sampled cancels the sampling (nobody would read it). Streaming sends the reply as
`chat.completion.chunk` server-sent events ending in `data: [DONE]`; the
engine samples a reply whole, so the chunks follow once it is sampled.

`/v1/responses` (the Responses API) is translated into a chat-completions
request (`responses_schema`) and answered by the same path (same bounds, same
recording and timelines); only its reply and events are shaped apart
(`responses_body`). With an episode key each response is kept until the
episode ends, so `previous_response_id` continues it: the kept conversation
is put before the new input, and the call is recorded as if the whole
history had been sent.

The routes are module-level functions of their request and the
`ChatService` they answer from (the `Chat` dependency), declared once on
`chat_routes`; `openai_router(...)` mounts them on one `ChatService`, and a test
calls a handler directly or mounts it alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from ...rollout import ChatModel, EpisodeRecorder
from ...rollout.recorder import EpisodeClosedError
from ..limits import ServerLimits
from ..openapi_body import declared_body, declared_errors
from ..provided import Provide, provided
from .chat_service import ChatService, OpenAIError, unauthorised
from .episode_keys import EpisodeKeys
from .responses_body import response_body, response_events
from .responses_schema import HISTORY_AS_INPUT, ResponsesRequest
from .schema import ChatCompletionRequest, completion_body, stream_chunks, validation_error_body
from .served_models import ServedModels

log = logging.getLogger(__name__)

T = TypeVar("T")

SERVICE_KEY = "chat_service"


@dataclass
class _Target:
    """Who answers one request."""

    chat_model: ChatModel
    """The model that samples the reply."""
    recorder: EpisodeRecorder | None
    """The episode the call is recorded in (None when served outside any episode)."""


def chat_service(request: Request) -> ChatService:
    """The `ChatService` this request's router was built on (`openai_router(...)` provides it)."""
    return provided(request, SERVICE_KEY)


Chat = Annotated[ChatService, Depends(chat_service)]

chat_routes = APIRouter(responses=declared_errors(400, 401, 404, 413, 500))
"""The routes, declared once; `openai_router` mounts them with their `ChatService`."""


def openai_router(
    models: ServedModels | Mapping[str, ChatModel] | None = None,
    episodes: EpisodeKeys | None = None,
    api_key: str | None = None,
    limits: ServerLimits | None = None,
    context_length: int | None = None,
) -> APIRouter:
    """`/v1/models` and `/v1/chat/completions` for episode keys (`episodes`) and named models (`models`).

    With `models=None` only episode keys are served. `api_key`, when set, is required of every caller
    that has no episode key. With `limits`, requests to named models are bounded (and, with the models'
    `context_length`, prompt + max_tokens must fit it) before any sampling starts.
    """
    served = models if isinstance(models, ServedModels) or models is None else ServedModels(models)
    service = ChatService(served, episodes, api_key, limits, context_length)
    router = APIRouter(dependencies=[Depends(Provide(SERVICE_KEY, service))])
    router.include_router(chat_routes)
    return router


@chat_routes.get("/v1/models")
async def list_models(request: Request, service: Chat):
    try:
        binding = service.episode_of(request.headers.get("authorization", ""))
    except OpenAIError as error:
        return error.response()
    names = [binding.chat_model.agent] if binding is not None else service.served.names()
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "sparring"} for name in names],
    }


@chat_routes.post("/v1/chat/completions", openapi_extra=declared_body(ChatCompletionRequest))
async def chat_completions(request: Request, service: Chat):
    try:
        binding = service.episode_of(request.headers.get("authorization", ""))
        chat = ChatCompletionRequest.model_validate(await _json_body(request))
        target, replies = await _answer(request, service, binding, chat)
    except OpenAIError as error:
        return error.response()
    except ValidationError as error:
        return JSONResponse(validation_error_body(error), status_code=400)
    renderer = target.chat_model.renderer
    if not chat.stream:
        return completion_body(chat.model, replies, chat.logprobs, renderer)
    include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
    chunks = stream_chunks(chat.model, replies, chat.logprobs, renderer, include_usage)
    return StreamingResponse(_sse(chunks), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@chat_routes.post("/v1/responses", openapi_extra=declared_body(ResponsesRequest))
async def responses(request: Request, service: Chat):
    """The Responses API: the request translated into a chat-completions one, answered (and recorded) by it."""
    try:
        binding = service.episode_of(request.headers.get("authorization", ""))
        asked = ResponsesRequest.model_validate(await _json_body(request))
        own_input = asked.input_items()
        if asked.previous_response_id is not None:
            asked = asked.continued(_stored_conversation(binding, asked.previous_response_id))
        target, (reply,) = await _answer(request, service, binding, asked.chat_request())
    except OpenAIError as error:
        return error.response()
    except ValidationError as error:
        return JSONResponse(validation_error_body(error), status_code=400)
    body = response_body(asked, reply, target.chat_model.renderer)
    if binding is not None:
        binding.responses.add(body, asked.previous_response_id, own_input)
        body["store"] = True
    if not asked.stream:
        return body
    events = response_events(body, reply, target.chat_model.renderer)
    return StreamingResponse(_sse_events(events), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _stored_conversation(binding, response_id: str) -> list:
    """The conversation a `previous_response_id` names: kept per episode key, so only an episode's endpoint has one."""
    if binding is None:
        message = (
            "previous_response_id: this server keeps no responses (an episode's endpoint keeps its own): "
            f"{HISTORY_AS_INPUT}"
        )
        raise OpenAIError(400, message, param="previous_response_id")
    history = binding.responses.history(response_id)
    if history is None:
        message = (
            f"previous_response_id: no response {response_id!r} was given with this episode key: {HISTORY_AS_INPUT}"
        )
        raise OpenAIError(400, message, param="previous_response_id")
    return history


async def _answer(request: Request, service: ChatService, binding, chat: ChatCompletionRequest) -> tuple[_Target, list]:
    """Who answers `chat` (the episode key's agent, or the named model within the server's bounds), and its replies."""
    if binding is not None:
        target = _Target(binding.chat_model, binding.recorder)
    else:
        target = _Target(await service.served_model(chat.model), None)
        service.check_bounds(target.chat_model, chat)
    return target, await _unless_client_leaves(request, _generate(target, chat))


async def _json_body(request: Request) -> dict:
    try:
        body = json.loads(await request.body() or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise OpenAIError(400, f"the request body is not valid JSON: {error}") from None
    except RecursionError:
        raise OpenAIError(400, "the request body is not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    return body


async def _generate(target: _Target, chat: ChatCompletionRequest):
    started = time.perf_counter()
    try:
        replies = await target.chat_model.generate(
            chat.chat_messages(),
            chat.tool_dicts(),
            tool_choice=chat.tool_choice,
            n=chat.n,
            recorder=target.recorder,
            **chat.sampling(),
        )
    except EpisodeClosedError as error:
        raise unauthorised(f"{error} (the episode key expired while the reply was sampled)") from None
    except (
        ValueError,
        TypeError,
    ) as error:  # bad messages, a prompt longer than the context, a sampling value the model rejects
        raise OpenAIError(400, f"{type(error).__name__}: {error}") from None
    except Exception as error:  # noqa: BLE001 - a failure of the model becomes an OpenAI-shaped 500, never a trace
        log.exception("chat completion failed")
        raise OpenAIError(500, f"the model failed: {type(error).__name__}: {error}", kind="server_error") from None
    log.debug("%s: %d replies in %.2fs", target.chat_model.agent, len(replies), time.perf_counter() - started)
    return replies


async def _sse(chunks: list[dict]):
    for chunk in chunks:
        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"


async def _sse_events(events: list[dict]):
    for event in events:
        yield f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


async def _unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`, cancelled as soon as the client disconnects: nobody would read what it computes."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        log.warning("client left before its reply was sampled; sampling cancelled")
        raise OpenAIError(499, "the client closed the request")
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
