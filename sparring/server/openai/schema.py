"""The OpenAI chat-completions wire format: validated requests and the bodies sent back.

`ChatCompletionRequest` validates a request body with pydantic, so a bad
field becomes a 400 in OpenAI's error shape (`error_body`) naming the field,
never a 500. It rejects what sparring cannot honour (`top_logprobs`,
penalties, `logit_bias`) by name instead of silently ignoring it, takes
constrained replies as OpenAI spells them (`response_format` json_object or
json_schema) and as vLLM's extra body does (`guided_choice`, `guided_regex`,
`guided_json`, so agents written for vLLM run unchanged),
checks `tool_choice` against the tools (all four OpenAI forms are honoured,
see `sparring.rollout.tool_choice`), and turns the rest into what a
`ChatModel` takes: plain message dicts, tool dicts, the tool choice and
sampling arguments.

`completion_body` and `stream_chunks` build the non-streaming reply and the
streamed `chat.completion.chunk`s from the same `ChatResponse`s, so both
carry the same text, tool calls and logprobs.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from ...rollout import ChatResponse, ToolChoice
from ...rollout.output_format import schema_of_response_format

MAX_N = 16
_UNSUPPORTED = {
    "top_logprobs": "this server returns the sampled tokens' logprobs only (logprobs=true, top_logprobs=0)",
    "presence_penalty": "only 0",
    "frequency_penalty": "only 0",
    "logit_bias": "only an empty map",
}


class TextPart(BaseModel):
    """One text part of a message whose content is a list (images and audio are not supported)."""

    type: Literal["text"]
    """Always 'text'."""
    text: str
    """The text."""


class FunctionCall(BaseModel):
    """The function a tool call names, with its arguments."""

    name: str
    """Function name."""
    arguments: str | dict = "{}"
    """Arguments as a JSON string (OpenAI) or an object."""


class ToolCall(BaseModel):
    """A tool call inside an assistant message the client sends back."""

    id: str | None = None
    """The call's id (tool messages answer it by tool_call_id)."""
    type: Literal["function"] = "function"
    """Always 'function'."""
    function: FunctionCall
    """Which function, with which arguments."""


class Message(BaseModel):
    """One chat message of a request."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    """Who speaks; 'developer' is rendered as 'system'."""
    content: str | list[TextPart] | None = None
    """Text, or a list of text parts; may be null only on an assistant message with tool_calls."""
    name: str | None = None
    """Participant name (accepted; chat templates do not render it)."""
    tool_calls: list[ToolCall] | None = None
    """Tool calls an assistant message made."""
    tool_call_id: str | None = None
    """The tool call a tool message answers."""

    @model_validator(mode="after")
    def _has_content(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        return self

    def as_chat(self) -> dict:
        """The message as a ChatModel takes it (text parts joined, so a resent reply compares equal)."""
        content = self.content if not isinstance(self.content, list) else "".join(part.text for part in self.content)
        message: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role, "content": content}
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump(exclude_none=True) for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class FunctionDefinition(BaseModel):
    """A function the model may call."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    """Function name."""
    description: str | None = None
    """What it does (shown to the model)."""
    parameters: dict | None = None
    """JSON schema of its arguments."""


class Tool(BaseModel):
    """One entry of `tools`."""

    type: Literal["function"]
    """Always 'function'."""
    function: FunctionDefinition
    """The function."""


class StreamOptions(BaseModel):
    """Options for streamed replies."""

    include_usage: bool = False
    """Send a last chunk with token usage."""


class ChatCompletionRequest(BaseModel):
    """A /v1/chat/completions request body."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    """Which model answers (ignored with an episode key: the key picks the agent's model)."""
    messages: list[Message] = Field(min_length=1)
    """The conversation so far."""
    tools: list[Tool] | None = None
    """Functions the model may call (rendered hermes-style for ChatML models)."""
    tool_choice: Literal["none", "auto", "required"] | dict | str | None = None
    """'auto' (default), 'none' (answer in text), 'required' (call a tool) or {'type': 'function', 'function':
    {'name': ...}}."""
    stream: bool = False
    """Send the reply as server-sent `chat.completion.chunk`s ending in `data: [DONE]`."""
    stream_options: StreamOptions | None = None
    """Streaming options (include_usage)."""
    n: int = Field(default=1, ge=1, le=MAX_N)
    """Replies to sample for the one prompt."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens per reply (older name of max_completion_tokens)."""
    max_completion_tokens: int | None = Field(default=None, ge=1)
    """Most tokens per reply; wins over max_tokens."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Softmax temperature; 0 is greedy."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int | None = Field(default=None, ge=-1)
    """Keep the k most likely tokens (a vLLM extension; -1 for no limit)."""
    seed: int | None = None
    """Same seed and prompt, same reply."""
    stop: str | list[str] | None = None
    """Up to 4 strings that end a reply (cut from the returned text)."""
    logprobs: bool = False
    """Return the sampler's logprob of every sampled token."""
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    """Alternatives per token: not supported (only 0 is accepted)."""
    presence_penalty: float | None = None
    """Not supported (only 0 is accepted)."""
    frequency_penalty: float | None = None
    """Not supported (only 0 is accepted)."""
    logit_bias: dict | None = None
    """Not supported (only an empty map is accepted)."""
    response_format: dict | None = None
    """{'type': 'text'}, {'type': 'json_object'} or {'type': 'json_schema', 'json_schema': {'name', 'schema'}}: the
    reply is sampled to be valid JSON (of the schema); a forced tool call is held to its tool's schema instead."""
    guided_choice: list[str] | None = Field(default=None, min_length=1)
    """The reply is exactly one of these strings (vLLM's extra-body spelling)."""
    guided_regex: str | None = None
    """The reply matches this regular expression (vLLM's extra-body spelling)."""
    guided_json: dict | str | None = None
    """The reply is JSON valid under this schema (vLLM's extra-body spelling; an object or its JSON text)."""
    parallel_tool_calls: bool | None = None
    """Accepted; the model may emit several tool calls in one reply either way."""
    user: str | None = None
    """Accepted and ignored."""
    metadata: dict | None = None
    """Accepted and ignored."""
    store: bool | None = None
    """Accepted and ignored."""
    service_tier: str | None = None
    """Accepted and ignored."""

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("at most 4 non-empty strings")
        return stop

    @field_validator(*_UNSUPPORTED)
    @classmethod
    def _unsupported(cls, value, info: ValidationInfo):
        if value:
            raise ValueError(f"not supported: {_UNSUPPORTED[info.field_name]}")
        return value

    @field_validator("response_format")
    @classmethod
    def _known_format(cls, value):
        schema_of_response_format(value)
        return value

    @field_validator("guided_json")
    @classmethod
    def _schema_object(cls, value):
        schema = json.loads(value) if isinstance(value, str) else value
        if schema is not None and not isinstance(schema, dict):
            raise ValueError("must be a JSON schema object")
        return schema

    @model_validator(mode="after")
    def _one_constraint(self) -> ChatCompletionRequest:
        given = [name for name in ("guided_choice", "guided_regex", "guided_json") if getattr(self, name) is not None]
        if schema_of_response_format(self.response_format) is not None:
            given.append("response_format")
        if len(given) > 1:
            raise ValueError(
                f"give at most one of response_format (json), guided_choice, guided_regex, guided_json; got {given}"
            )
        return self

    @field_validator("tool_choice")
    @classmethod
    def _known_tool_choice(cls, value, info: ValidationInfo):
        tools = info.data.get("tools") or []
        ToolChoice.of(value, [{"function": {"name": tool.function.name}} for tool in tools])
        return value

    def chat_messages(self) -> list[dict]:
        return [message.as_chat() for message in self.messages]

    def tool_dicts(self) -> list[dict] | None:
        """The tools, offered under every tool_choice ('none' included, so the prompt stays the one 'auto' gets)."""
        if not self.tools:
            return None
        return [tool.model_dump(exclude_none=True) for tool in self.tools]

    def sampling(self) -> dict:
        """Sampling arguments for a ChatModel: only those the request sets (the model's defaults fill the rest)."""
        given = {
            "max_tokens": self.max_completion_tokens or self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
            "stop": self.stop,
            "choices": self.guided_choice,
            "regex": self.guided_regex,
            "response_format": self._text_format(),
        }
        return {name: value for name, value in given.items() if value is not None}

    def forces_call(self) -> bool:
        """Whether `tool_choice` forces a tool call ('required' or a named function; validated against `tools`)."""
        return bool(self.tools) and ToolChoice.of(self.tool_choice, self.tool_dicts()).forces_call

    def _text_format(self) -> dict | None:
        """The constraint on the reply's text: `guided_json`, or `response_format` unless a tool call is forced.

        As in OpenAI's API, `response_format` shapes the text a model writes, not a tool call: a forced call is
        the whole reply, held to its tool's schema, and the format has nothing to apply to (the OpenAI Agents
        SDK sends an agent's `output_type` with every request, `tool_choice="required"` ones included)."""
        if self.guided_json is not None:
            return {"type": "json_schema", "json_schema": {"name": "guided_json", "schema": self.guided_json}}
        return None if self.forces_call() else self.response_format


def error_body(
    message: str, param: str | None = None, kind: str = "invalid_request_error", code: str | None = None
) -> dict:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def validation_error_body(error: ValidationError) -> dict:
    """The first problem of a failed validation, naming its field (e.g. `messages[0].role`)."""
    first = error.errors()[0]
    param = ""
    for part in first["loc"]:
        param += f"[{part}]" if isinstance(part, int) else f".{part}" if param else str(part)
    reason = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        reason = "unrecognized request argument"
    return error_body(f"{param}: {reason}" if param else reason, param or None)


def _finish_reason(reply: ChatResponse) -> str:
    return "length" if reply.stop_reason == "length" else "tool_calls" if reply.tool_calls else "stop"


def _wire_message(reply: ChatResponse) -> dict:
    """The assistant message as OpenAI sends it: content null beside tool calls, unique tool-call ids."""
    calls = [{**call, "id": f"call_{uuid.uuid4().hex[:24]}"} for call in reply.tool_calls]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _logprob_entries(reply: ChatResponse, renderer) -> list[dict]:
    """One entry per sampled token (the end-of-turn token excluded, as OpenAI does)."""
    pairs = list(zip(reply.tokens, reply.logprobs, strict=True))
    stops = set(renderer.stop_token_ids) if renderer is not None else set()
    while pairs and pairs[-1][0] in stops:
        pairs.pop()
    entries = []
    for token, logprob in pairs:
        text = renderer.decode([token]) if renderer is not None else ""
        entries.append({"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8")), "top_logprobs": []})
    return entries


def _usage(replies: list[ChatResponse]) -> dict:
    prompt = replies[0].prompt_tokens if replies else 0
    completion = sum(len(reply.tokens) for reply in replies)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(model: str, replies: list[ChatResponse], logprobs: bool, renderer) -> dict:
    """A `chat.completion` for the replies to one request."""
    choices = [
        {
            "index": index,
            "message": _wire_message(reply),
            "logprobs": {"content": _logprob_entries(reply, renderer)} if logprobs else None,
            "finish_reason": _finish_reason(reply),
        }
        for index, reply in enumerate(replies)
    ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(replies),
    }


def _content_pieces(content: str, token_texts: list[str]) -> list[str] | None:
    """The part of `content` each token produced, or None when the tokens' texts do not line up with it."""
    joined = "".join(token_texts)
    start = joined.find(content) if content else -1
    if start < 0:
        return None
    end, pieces, position = start + len(content), [], 0
    for text in token_texts:
        low, high = max(position, start), min(position + len(text), end)
        pieces.append(joined[low:high] if low < high else "")
        position += len(text)
    return pieces


def _choice_deltas(reply: ChatResponse, logprobs: bool, renderer) -> list[tuple[dict, list[dict] | None]]:
    """(delta, logprob entries) chunks for one reply: content token by token where possible, then tool calls."""
    message = _wire_message(reply)
    entries = _logprob_entries(reply, renderer)
    content = message["content"] or ""
    pieces = _content_pieces(content, [entry["token"] for entry in entries]) if renderer is not None else None
    grouped: list[tuple[str, list[dict]]] = []
    if pieces is None:
        grouped = [(content, entries)] if content or entries else []
    else:
        pending: list[dict] = []
        for piece, entry in zip(pieces, entries, strict=True):
            pending.append(entry)
            if piece:
                grouped.append((piece, pending))
                pending = []
        if pending:
            grouped = grouped[:-1] + [(grouped[-1][0], grouped[-1][1] + pending)] if grouped else [("", pending)]
    deltas: list[tuple[dict, list[dict] | None]] = [({"role": "assistant", "content": ""}, None)]
    deltas += [({"content": piece}, group if logprobs else None) for piece, group in grouped]
    deltas += [
        ({"tool_calls": [{"index": index, **call}]}, None) for index, call in enumerate(message.get("tool_calls", []))
    ]
    return deltas


def stream_chunks(model: str, replies: list[ChatResponse], logprobs: bool, renderer, include_usage: bool) -> list[dict]:
    """The `chat.completion.chunk`s of a streamed reply, in order (the caller adds `data: [DONE]`)."""
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    chunks = []
    for index, reply in enumerate(replies):
        for delta, entries in _choice_deltas(reply, logprobs, renderer):
            choice = {
                "index": index,
                "delta": delta,
                "logprobs": {"content": entries} if entries is not None else None,
                "finish_reason": None,
            }
            chunks.append({**head, "choices": [choice]})
        chunks.append(
            {
                **head,
                "choices": [{"index": index, "delta": {}, "logprobs": None, "finish_reason": _finish_reason(reply)}],
            }
        )
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(replies)})
    return chunks
