"""`ChatService`: what the OpenAI-compatible routes answer from, and `OpenAIError`, how they refuse.

One `ChatService` holds what one `openai_router(...)` was built with: the
named models (`ServedModels`), the episode keys, the API key for callers
without an episode key, and the bounds a request to a named model must fit.
It decides who answers a request (`episode_of`, `served_model`) and whether
the request fits (`check_bounds`); the routes (`routes`) turn HTTP into those
calls, so each part is testable without the other.
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse

from ...rollout import ChatModel
from ..limits import LimitExceeded, ServerLimits, check_sampling_room
from .episode_keys import EPISODE_KEY_PREFIX, EpisodeBinding, EpisodeKeys
from .prompt_bound import PromptBound
from .schema import ChatCompletionRequest, error_body
from .served_models import ServedModels, UnservedModelError


class OpenAIError(Exception):
    """A request that gets an OpenAI-shaped error response."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.body = error_body(message, param, kind, code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status)


def unauthorised(message: str) -> OpenAIError:
    return OpenAIError(401, message, kind="authentication_error", code="invalid_api_key")


@dataclass
class ChatService:
    """The models, keys and bounds behind one OpenAI-compatible router."""

    served: ServedModels | None = None
    """The named models a caller without an episode key may ask for; None serves episode keys only."""
    episodes: EpisodeKeys | None = None
    """The episode keys this router answers (each routes to one agent of one episode)."""
    api_key: str | None = None
    """When set, the bearer token every caller without an episode key must send."""
    limits: ServerLimits | None = None
    """When set, the bounds a request to a named model must fit before sampling starts."""
    context_length: int | None = None
    """The named models' context length (prompt + max_tokens must fit it; checked with `limits`)."""
    prompt_bounds: dict[int, PromptBound] = field(default_factory=dict)
    """Cheap prompt-length bounds, one per tokenizer (by id), built on first use."""

    def episode_of(self, authorization: str) -> EpisodeBinding | None:
        """The episode an `Authorization` header's key routes to, or None for a caller of named models (401 if
        neither)."""
        key = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
        if key.startswith(EPISODE_KEY_PREFIX):
            binding = self.episodes.lookup(key) if self.episodes is not None else None
            if binding is None:
                raise unauthorised("this episode key is not valid here: unknown, or its episode has ended")
            return binding
        if self.served is None:
            raise unauthorised(
                "this endpoint serves episode keys only: use the api_key from tuner.as_base_url_api_key(...)"
            )
        if self.api_key is not None and not hmac.compare_digest(key.encode(), self.api_key.encode()):
            raise unauthorised("missing or wrong API key (send it as 'Authorization: Bearer <key>')")
        return None

    async def served_model(self, name: str) -> ChatModel:
        """The named model `name` (404 if not served, 400 if it cannot be loaded)."""
        try:
            # In a thread: loading an adapter waits for the engine, which must not stop the event loop.
            return await asyncio.to_thread(self.served.resolve, name)
        except UnservedModelError as error:
            raise OpenAIError(404, error.args[0], param="model", code="model_not_found") from None
        except (OSError, ValueError) as error:
            raise OpenAIError(400, f"model {name!r} could not be loaded: {error}", param="model") from None

    def check_bounds(self, chat_model: ChatModel, chat: ChatCompletionRequest) -> None:
        """The request's work fits the server's limits and the model's context (OpenAIError 400 naming the field if
        not).

        A prompt is rendered (tokenized whole) only once its cheap bounds (`PromptBound`) say it may fit."""
        if self.limits is None:
            return
        limits, context_length = self.limits, self.context_length
        max_tokens = chat.max_completion_tokens or chat.max_tokens
        field_name = "max_completion_tokens" if chat.max_completion_tokens else "max_tokens"
        try:
            limits.check_num_samples("n", chat.n)
            if context_length is not None and chat_model.renderer is not None:
                check_sampling_room(field_name, 0, max_tokens, context_length)
                tokenizer = chat_model.renderer.tokenizer
                bound = self.prompt_bounds.get(id(tokenizer)) or self.prompt_bounds.setdefault(
                    id(tokenizer), PromptBound(tokenizer)
                )
                texts = [message["content"] for message in chat.chat_messages() if isinstance(message["content"], str)]
                bound.check(texts, context_length - (max_tokens or 1), context_length)
                try:
                    prompt = len(chat_model.renderer.render(chat.chat_messages(), tools=chat.tool_dicts()))
                except (ValueError, TypeError, KeyError):
                    return  # sampling reports what is wrong with the messages
                check_sampling_room(field_name, prompt, max_tokens, context_length)
                what = f"the prompt ({prompt}) + n ({chat.n}) x {field_name}"
                limits.check_tokens(field_name, prompt + chat.n * (max_tokens or context_length - prompt), what)
        except LimitExceeded as error:
            raise OpenAIError(400, str(error), param=error.field) from None
