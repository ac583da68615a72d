"""OpenAI-compatible chat: `/v1/models` and `/v1/chat/completions` over sparring chat models.

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
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Mapping, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from ...rollout import ChatModel, EpisodeRecorder
from ...rollout.recorder import EpisodeClosedError
from ..limits import LimitExceeded, ServerLimits, check_sampling_room
from ..openapi_body import declared_body, declared_errors
from .episode_keys import EPISODE_KEY_PREFIX, EpisodeKeys
from .prompt_bound import PromptBound
from .schema import ChatCompletionRequest, completion_body, error_body, stream_chunks, validation_error_body
from .served_models import ServedModels, UnservedModelError

log = logging.getLogger(__name__)

T = TypeVar("T")


class OpenAIError(Exception):
    """A request that gets an OpenAI-shaped error response."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status = status
        self.body = error_body(message, param, kind, code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status)


@dataclass
class _Target:
    """Who answers one request."""

    chat_model: ChatModel
    """The model that samples the reply."""
    recorder: EpisodeRecorder | None
    """The episode the call is recorded in (None when served outside any episode)."""


def _unauthorised(message: str) -> OpenAIError:
    return OpenAIError(401, message, kind="authentication_error", code="invalid_api_key")


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
    router = APIRouter(responses=declared_errors(400, 401, 404, 413, 500))
    prompt_bounds: dict[int, PromptBound] = {}

    def episode_of(request: Request):
        header = request.headers.get("authorization", "")
        key = header[7:].strip() if header[:7].lower() == "bearer " else ""
        if key.startswith(EPISODE_KEY_PREFIX):
            binding = episodes.lookup(key) if episodes is not None else None
            if binding is None:
                raise _unauthorised("this episode key is not valid here: unknown, or its episode has ended")
            return binding
        if served is None:
            raise _unauthorised("this endpoint serves episode keys only: use the api_key from tuner.as_base_url_api_key(...)")
        if api_key is not None and not hmac.compare_digest(key.encode(), api_key.encode()):
            raise _unauthorised("missing or wrong API key (send it as 'Authorization: Bearer <key>')")
        return None

    async def served_model(name: str) -> ChatModel:
        try:
            # In a thread: loading an adapter waits for the engine, which must not stop the event loop.
            return await asyncio.to_thread(served.resolve, name)
        except UnservedModelError as error:
            raise OpenAIError(404, error.args[0], param="model", code="model_not_found") from None
        except (OSError, ValueError) as error:
            raise OpenAIError(400, f"model {name!r} could not be loaded: {error}", param="model") from None

    @router.get("/v1/models")
    async def list_models(request: Request):
        try:
            binding = episode_of(request)
        except OpenAIError as error:
            return error.response()
        names = [binding.chat_model.agent] if binding is not None else served.names()
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "sparring"} for name in names]}

    @router.post("/v1/chat/completions", openapi_extra=declared_body(ChatCompletionRequest))
    async def chat_completions(request: Request):
        try:
            binding = episode_of(request)
            chat = ChatCompletionRequest.model_validate(await _json_body(request))
            target = _Target(binding.chat_model, binding.recorder) if binding is not None else _Target(await served_model(chat.model), None)
            if binding is None and limits is not None:
                _check_bounds(target.chat_model, chat, limits, context_length, prompt_bounds)
            replies = await _unless_client_leaves(request, _generate(target, chat))
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

    return router


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
            chat.chat_messages(), chat.tool_dicts(), tool_choice=chat.tool_choice, n=chat.n, recorder=target.recorder, **chat.sampling()
        )
    except EpisodeClosedError as error:
        raise _unauthorised(f"{error} (the episode key expired while the reply was sampled)") from None
    except (ValueError, TypeError) as error:  # bad messages, a prompt longer than the context, a sampling value the model rejects
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


def _check_bounds(chat_model: ChatModel, chat: ChatCompletionRequest, limits: ServerLimits, context_length: int | None, bounds: dict[int, PromptBound]) -> None:
    """The request's work fits the server's limits and the model's context (OpenAIError 400 naming the field if not).

    A prompt is rendered (tokenized whole) only once its cheap bounds (`PromptBound`) say it may fit."""
    max_tokens = chat.max_completion_tokens or chat.max_tokens
    field = "max_completion_tokens" if chat.max_completion_tokens else "max_tokens"
    try:
        limits.check_num_samples("n", chat.n)
        if context_length is not None and chat_model.renderer is not None:
            check_sampling_room(field, 0, max_tokens, context_length)
            tokenizer = chat_model.renderer.tokenizer
            bound = bounds.get(id(tokenizer)) or bounds.setdefault(id(tokenizer), PromptBound(tokenizer))
            texts = [message["content"] for message in chat.chat_messages() if isinstance(message["content"], str)]
            bound.check(texts, context_length - (max_tokens or 1), context_length)
            try:
                prompt = len(chat_model.renderer.render(chat.chat_messages(), tools=chat.tool_dicts()))
            except (ValueError, TypeError, KeyError):
                return  # sampling reports what is wrong with the messages
            check_sampling_room(field, prompt, max_tokens, context_length)
            limits.check_tokens(field, prompt + chat.n * (max_tokens or context_length - prompt), f"the prompt ({prompt}) + n ({chat.n}) x {field}")
    except LimitExceeded as error:
        raise OpenAIError(400, str(error), param=error.field) from None


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
