"""An in-process stand-in for `openai.AsyncOpenAI`'s chat completions.

Agent code written against the `openai` SDK (`await client.chat.completions
.create(model=..., messages=..., tools=...)`) runs unchanged against a
sparring chat model: the call goes straight to the `ChatModel` (so a
trainable agent records its tokens on the episode), and the reply comes back
as the SDK's own `ChatCompletion` type. No port is opened.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from openai.types.chat import ChatCompletion

from .chat_model import ChatModel

# OpenAI parameter names -> sparring sampling names; parameters with no sampling meaning are ignored.
_RENAMED = {"max_completion_tokens": "max_tokens"}
_IGNORED = {"model", "n", "stream", "tool_choice", "parallel_tool_calls", "user", "logprobs", "top_logprobs", "response_format"}


class _Completions:
    def __init__(self, chat_model: ChatModel):
        self._chat_model = chat_model

    async def create(self, *, messages: list[dict], tools: list[dict] | None = None, **options: Any) -> ChatCompletion:
        if options.get("n", 1) != 1 or options.get("stream"):
            raise ValueError("the in-process client supports n=1 without streaming")
        sampling = {_RENAMED.get(k, k): v for k, v in options.items() if k not in _IGNORED and v is not None}
        response = await self._chat_model(messages, tools=tools, **sampling)
        finish = "length" if response.stop_reason == "length" else "tool_calls" if response.tool_calls else "stop"
        return ChatCompletion.model_validate(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": options.get("model") or self._chat_model.agent,
                "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **response.message}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": len(response.tokens), "total_tokens": len(response.tokens)},
            }
        )


class _Chat:
    def __init__(self, chat_model: ChatModel):
        self.completions = _Completions(chat_model)


class InProcessOpenAI:
    """`client.chat.completions.create(...)` over a sparring ChatModel."""

    def __init__(self, chat_model: ChatModel):
        self.chat = _Chat(chat_model)
