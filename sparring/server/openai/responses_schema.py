"""The OpenAI Responses API's request (`POST /v1/responses`), translated into a chat-completions request.

`ResponsesRequest` validates a Responses body with pydantic (a bad field is a 400 naming it, like chat
completions) and `chat_request()` turns it into the `ChatCompletionRequest` the chat route samples from, so a
Responses call is answered, bounded, recorded and trained by exactly the chat-completions path:

- `instructions` becomes a leading system message; a text `input` one user message;
- input items: messages (`input_text` / `output_text` parts joined), `function_call` items (joined into the
  assistant message before them, as the reply they came from was one message, so a resent reply continues
  its timeline token for token) and `function_call_output` items (tool messages); `reasoning` items are skipped
  (this server never sends any);
- function `tools` (flat, as the Responses API spells them) and `tool_choice` (`{"type": "function", "name"}`);
- `text.format` (text, json_object, json_schema) becomes `response_format`; `max_output_tokens` `max_tokens`.

`previous_response_id` continues a response given earlier with the same episode key (the route keeps an
episode's responses, `ResponseStore`, and `continued()` puts that conversation's items before this input, so
the turns are recorded exactly as if the whole history had been sent); `sparring serve` keeps none, so there it
is a 400 saying to send the history as input items. Also refused by name: built-in tools, `conversation`,
`background`, `top_logprobs`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .schema import ChatCompletionRequest

HISTORY_AS_INPUT = (
    "send the conversation so far as input items instead (the earlier input items, each reply's output items, "
    "then the new ones)"
)
_REFUSED = {
    "conversation": f"this server keeps no conversations: {HISTORY_AS_INPUT}; an episode's endpoint also takes "
    "previous_response_id",
    "background": "only foreground responses",
    "prompt": "stored prompt templates are not supported",
    "top_logprobs": "this server returns no alternatives per token",
}


class InputPart(BaseModel):
    """One text part of an input message's content (images and files are not supported)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["input_text", "output_text", "text"]
    """'input_text' (user, system, developer) or 'output_text' (an assistant reply sent back)."""
    text: str
    """The text."""


class InputItem(BaseModel):
    """One item of a list `input`: a message, a function call sent back, a function call's output, or reasoning."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["message", "function_call", "function_call_output", "reasoning"] = "message"
    """What the item is; a message may leave it out."""
    role: Literal["user", "system", "developer", "assistant"] | None = None
    """Who speaks (messages only)."""
    content: str | list[InputPart] | None = None
    """A message's text, or its text parts."""
    call_id: str | None = None
    """The call a function_call makes or a function_call_output answers."""
    name: str | None = None
    """The function a function_call calls."""
    arguments: str | None = None
    """A function_call's arguments (JSON text)."""
    output: str | list[InputPart] | None = None
    """A function_call_output's result."""

    def check(self) -> None:
        """Raise ValueError naming what this item lacks."""
        needs = {
            "message": ("role", "content"),
            "function_call": ("call_id", "name", "arguments"),
            "function_call_output": ("call_id", "output"),
        }
        missing = [name for name in needs.get(self.type, ()) if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.type} item needs {', '.join(missing)}")


def _text(content: str | list[InputPart] | None) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content or [])


class FunctionTool(BaseModel):
    """A function the model may call, as the Responses API spells it (flat: no nested `function`)."""

    model_config = ConfigDict(extra="ignore")

    type: str
    """Only 'function' (built-in tools such as web_search are not served here)."""
    name: str = Field(min_length=1)
    """Function name."""
    description: str | None = None
    """What it does (shown to the model)."""
    parameters: dict | None = None
    """JSON schema of its arguments."""
    strict: bool | None = None
    """Accepted; a forced call is held to `parameters` either way."""

    @field_validator("type")
    @classmethod
    def _function_only(cls, kind):
        if kind != "function":
            raise ValueError(f"tool type {kind!r} is not served here; only 'function' tools")
        return kind

    def chat_tool(self) -> dict:
        function = self.model_dump(include={"name", "description", "parameters", "strict"}, exclude_none=True)
        return {"type": "function", "function": function}


class ResponsesRequest(BaseModel):
    """A /v1/responses request body."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    """Which model answers (ignored with an episode key: the key picks the agent's model)."""
    input: str | list[InputItem]
    """The user's text, or the conversation so far as items."""
    instructions: str | None = None
    """A system message put before the input."""
    tools: list[FunctionTool] | None = None
    """Functions the model may call."""
    tool_choice: Literal["none", "auto", "required"] | dict | None = None
    """'auto' (default), 'none', 'required' or {'type': 'function', 'name': NAME}."""
    text: dict | None = None
    """{'format': {'type': 'text' | 'json_object' | 'json_schema', 'name', 'schema'}}: the reply's format."""
    stream: bool = False
    """Send the reply as server-sent Responses events ending in `response.completed`."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Most tokens in the reply."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Softmax temperature; 0 is greedy."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    seed: int | None = None
    """Same seed and input, same reply (an extension, as in chat completions)."""
    previous_response_id: str | None = None
    """A response given earlier with the same episode key, whose conversation this input continues (episode keys
    only)."""
    conversation: Any = None
    """Not supported: send the whole conversation as input."""
    background: bool | None = None
    """Not supported (only foreground)."""
    prompt: Any = None
    """Not supported (stored prompt templates)."""
    top_logprobs: int | None = None
    """Not supported (only 0)."""
    parallel_tool_calls: bool | None = None
    """Accepted; the model may emit several calls either way."""
    store: bool | None = None
    """Accepted; an episode's endpoint keeps its responses until the episode ends (for previous_response_id),
    `sparring serve` none."""
    include: list[str] | None = None
    """Accepted and ignored."""
    metadata: dict | None = None
    """Accepted and echoed."""
    user: str | None = None
    """Accepted and ignored."""
    reasoning: dict | None = None
    """Accepted and ignored (the model does not reason apart from its reply)."""
    truncation: str | None = None
    """Accepted and ignored (a prompt too long for the context is a 400)."""
    service_tier: str | None = None
    """Accepted and ignored."""
    max_tool_calls: int | None = None
    """Accepted and ignored."""
    stream_options: dict | None = None
    """Accepted and ignored."""
    prompt_cache_key: str | None = None
    """Accepted and ignored (the prefix cache works by tokens)."""
    prompt_cache_retention: str | None = None
    """Accepted and ignored."""
    safety_identifier: str | None = None
    """Accepted and ignored."""

    @field_validator(*_REFUSED)
    @classmethod
    def _refused(cls, value, info: ValidationInfo):
        if value:
            raise ValueError(f"not supported: {_REFUSED[info.field_name]}")
        return value

    @field_validator("input")
    @classmethod
    def _items_complete(cls, value):
        if isinstance(value, list):
            if not value:
                raise ValueError("give at least one input item")
            for item in value:
                item.check()
            if all(item.type == "reasoning" for item in value):
                raise ValueError("no message to answer (only reasoning items)")
        return value

    @field_validator("text")
    @classmethod
    def _known_format(cls, text):
        if text is not None and text.get("format") is not None:
            _response_format(text["format"])  # raises naming what is wrong
        return text

    def input_items(self) -> list[InputItem]:
        """The input as items (a text input is one user message)."""
        if isinstance(self.input, str):
            return [InputItem(type="message", role="user", content=self.input)]
        return list(self.input)

    def continued(self, history: list[InputItem]) -> ResponsesRequest:
        """This request with `history` (a stored conversation's items) put before its own input."""
        return self.model_copy(update={"input": [*history, *self.input_items()]})

    def chat_request(self) -> ChatCompletionRequest:
        """The chat-completions request this Responses request stands for (raises pydantic's ValidationError)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.chat_messages(),
            "max_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
        }
        if self.tools:
            body["tools"] = [tool.chat_tool() for tool in self.tools]
        if self.tool_choice is not None:
            body["tool_choice"] = _chat_tool_choice(self.tool_choice)
        if self.text is not None and self.text.get("format") is not None:
            body["response_format"] = _response_format(self.text["format"])
        return ChatCompletionRequest.model_validate({key: value for key, value in body.items() if value is not None})

    def chat_messages(self) -> list[dict]:
        """The input as chat messages: function calls joined into the assistant message they follow."""
        messages: list[dict] = []
        if self.instructions is not None:
            messages.append({"role": "system", "content": self.instructions})
        if isinstance(self.input, str):
            return [*messages, {"role": "user", "content": self.input}]
        for item in self.input:
            if item.type == "message":
                messages.append({"role": item.role, "content": _text(item.content)})
            elif item.type == "function_call":
                function = {"name": item.name, "arguments": item.arguments}
                call = {"id": item.call_id, "type": "function", "function": function}
                last = messages[-1] if messages else None
                if last is not None and last["role"] == "assistant":
                    last.setdefault("tool_calls", []).append(call)
                else:
                    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            elif item.type == "function_call_output":
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output)})
        return messages


def _chat_tool_choice(tool_choice: Any) -> Any:
    """The chat-completions spelling of a Responses `tool_choice` (`{'type': 'function', 'name'}` nests the name)."""
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function" and "function" not in tool_choice:
        return {"type": "function", "function": {"name": tool_choice.get("name")}}
    return tool_choice


def _response_format(text_format: Any) -> dict:
    """The chat-completions `response_format` of a Responses `text.format`."""
    if not isinstance(text_format, dict) or text_format.get("type") not in ("text", "json_object", "json_schema"):
        raise ValueError(f"format must be {{'type': 'text' | 'json_object' | 'json_schema', ...}}, got {text_format!r}")
    if text_format["type"] != "json_schema":
        return {"type": text_format["type"]}
    if not isinstance(text_format.get("schema"), dict):
        raise ValueError("a json_schema format needs 'schema', a JSON schema object")
    name = text_format.get("name") or "response"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": text_format["schema"]}}
