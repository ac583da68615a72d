"""The OpenAI Responses API's replies: the `response` object and its streamed events, from one `ChatResponse`.

`response_body` builds the `response` object: a `message` output item for the reply's text (when it has text,
or no tool calls), then one `function_call` item per tool call; `status` is `incomplete` (reason
`max_output_tokens`) when the reply was cut by its token limit. `response_events` gives the server-sent events
the openai SDK's `responses.stream(...)` / `create(stream=True)` consume, in OpenAI's order:
`response.created`, `response.in_progress`, per item `output_item.added`, its content or arguments as deltas
and `.done`s, `output_item.done`, then `response.completed` (or `response.incomplete`). The engine samples a
reply whole, so the events follow once it is sampled, carrying exactly the non-streamed body's items.

`ResponseStore` keeps the responses given with one episode key, so a later request's `previous_response_id`
continues one: each response keeps the id it continued and the items it added (its own input items, then its
output items), so a conversation is kept once, not once per turn, and only until the episode ends.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from ...rollout import ChatResponse
from .responses_schema import InputItem, ResponsesRequest
from .schema import _content_pieces


def response_body(request: ResponsesRequest, reply: ChatResponse, renderer) -> dict:
    """The `response` object answering `request` with `reply`."""
    cut = reply.stop_reason == "length"
    output: list[dict] = []
    if reply.content or not reply.tool_calls:
        part = {"type": "output_text", "text": reply.content, "annotations": [], "logprobs": []}
        message = {"type": "message", "id": _id("msg"), "status": "completed", "role": "assistant", "content": [part]}
        output.append(message)
    for call in reply.tool_calls:
        function = call["function"]
        ids = {"id": _id("fc"), "call_id": _id("call")}
        named = {"name": function["name"], "arguments": function["arguments"]}
        output.append({"type": "function_call", **ids, **named, "status": "completed"})
    if cut and output:
        output[-1]["status"] = "incomplete"  # the item the token limit cut
    usage = {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": len(reply.tokens),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.prompt_tokens + len(reply.tokens),
    }
    return {
        "id": _id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": request.model,
        "instructions": request.instructions,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
        "tool_choice": request.tool_choice or "auto",
        "tools": [tool.model_dump(exclude_none=True) for tool in request.tools or []],
        "text": request.text or {"format": {"type": "text"}},
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "metadata": request.metadata or {},
        "store": False,
        "previous_response_id": request.previous_response_id,
        "usage": usage,
    }


def response_events(body: dict, reply: ChatResponse, renderer) -> list[dict]:
    """The streamed events of `body` (`response_body`'s object for `reply`), in order; each has its `type`."""
    events: list[dict] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    started = {**body, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    emit("response.created", response=started)
    emit("response.in_progress", response=started)
    for index, item in enumerate(body["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            emit(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            emit("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
            for piece in _text_pieces(part["text"], reply, renderer):
                emit("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
            emit("response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[])
            emit("response.content_part.done", **where, content_index=0, part=part)
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            emit("response.function_call_arguments.delta", **where, delta=item["arguments"])
            emit("response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"])
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.incomplete" if body["status"] == "incomplete" else "response.completed", response=body)
    return events


def _text_pieces(text: str, reply: ChatResponse, renderer) -> list[str]:
    """The reply's text token by token where the tokens line up with it, else whole."""
    if not text:
        return []
    if renderer is None:
        return [text]
    pieces = _content_pieces(text, [renderer.decode([token]) for token in reply.tokens])
    return [piece for piece in pieces if piece] if pieces else [text]


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseStore:
    """The responses given with one episode key, by id, so `previous_response_id` can continue one."""

    def __init__(self) -> None:
        self._turns: dict[str, tuple[str | None, list[InputItem]]] = {}
        self._lock = threading.Lock()

    def add(self, body: dict, previous_id: str | None, own_input: list[InputItem]) -> None:
        """Keep `body` (a `response_body` object) as the turn after `previous_id` that sent `own_input`."""
        output = [InputItem.model_validate(item) for item in body["output"]]
        with self._lock:
            self._turns[body["id"]] = (previous_id, [*own_input, *output])

    def history(self, response_id: str) -> list[InputItem] | None:
        """The whole conversation `response_id` ended (every input and output item, oldest first); None if unknown."""
        turns = []
        with self._lock:
            if response_id not in self._turns:
                return None
            while response_id is not None:
                response_id, items = self._turns[response_id]
                turns.append(items)
        return [item for items in reversed(turns) for item in items]

    def __len__(self) -> int:
        with self._lock:
            return len(self._turns)
