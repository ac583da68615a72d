"""What both AgentScope adapters share: message clean-up for the renderer, tool_choice handling, the history
checks, cancellation, and turning a sparring reply into text and tool calls.

`HistoryRewriteWarning` is warned (once per agent) when a trainable agent's
new prompt no longer extends the conversation it has open, e.g. because a
multi-agent formatter folded its earlier replies into one user message;
`ForeignTurnsWarning` when its prompt holds assistant turns of several
speakers (a plain chat formatter in a multi-agent game: the chat template has
no speaker names, so they would all read as the agent's own turns).

AgentScope agents swallow task cancellation, which would let an episode run
past its timeout and keep its reward; a cancelled episode's model calls raise
`EpisodeCancelledError` instead, which ends the episode as an error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

from ..rollout.chat_model import ChatModel, ChatResponse, normalised_message
from ..rollout.recorder import current_recorder

STRUCTURED_TOOL = "generate_structured_output"
"""The tool both AgentScope majors force for structured output: a local model holds its arguments to the schema."""


class HistoryRewriteWarning(UserWarning):
    """A trainable agent's prompt stopped extending its own earlier conversation, so its calls no longer merge."""


class ForeignTurnsWarning(UserWarning):
    """A trainable agent's prompt has other speakers' messages as assistant turns: it would read them as its own
    words."""


class EpisodeCancelledError(RuntimeError):
    """The episode was cancelled (e.g. timed out) while an AgentScope agent used its model.

    Both AgentScope majors catch `asyncio.CancelledError` in their agents and
    reply as if interrupted, so a cancelled episode would run on and keep its
    reward; this error is one they let through.
    """


# ---------------------------------------------------------------- formatting


def _text(content: Any) -> str:
    """Message content as one string; only text parts are accepted (the renderer is text-only)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if not (isinstance(part, dict) and part.get("type") == "text"):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ValueError(f"sparring chat models take text only; the formatter produced a {kind!r} content part")
        parts.append(part.get("text") or "")
    return "".join(parts)


def to_chat_messages(messages: list[dict]) -> list[dict]:
    """A formatter's OpenAI-style messages as sparring chat messages: text content, names dropped."""
    cleaned = []
    for message in messages:
        entry = {"role": message["role"], "content": _text(message.get("content"))}
        if message.get("tool_calls"):
            entry["tool_calls"] = message["tool_calls"]
        if message.get("tool_call_id") is not None:
            entry["tool_call_id"] = message["tool_call_id"]
        cleaned.append(entry)
    return cleaned


def own_turns(messages: list[dict], agent_name: str | None) -> list[dict]:
    """Keep `agent_name`'s replies as assistant turns; other speakers become user turns "Name: text".

    Every message is rewritten on its own, so formatting a longer history
    never changes the messages an earlier prompt was built from.
    """
    if agent_name is None:
        return messages
    result = []
    for message in messages:
        name = message.get("name")
        foreign = message["role"] == "assistant" and name != agent_name
        named_user = message["role"] == "user" and name not in (None, "", "user")
        if foreign and message.get("tool_calls"):
            # Agents share only their final (text) replies; tool calls under another name mean a misnamed agent.
            raise ValueError(
                f"the formatter for agent {agent_name!r} got tool calls from {name!r}: give the agent the "
                f"name {agent_name!r} (or the formatter the agent's name)"
            )
        if foreign or named_user:
            text = _text(message.get("content"))
            # Content as a list of parts, as the formatter's own messages have it.
            message = {"role": "user", "content": [{"type": "text", "text": f"{name}: {text}" if name else text}]}
        result.append(message)
    return result


# ---------------------------------------------------------------- calling


def warn_if_history_rewritten(chat_model: ChatModel, messages: list[dict]) -> None:
    """Warn when a trainable agent's prompt starts like an open conversation of it but does not extend it."""
    recorder = current_recorder()
    model_key = getattr(chat_model, "model_key", None)
    if recorder is None or not chat_model.trainable or model_key is None:
        return
    open_ones = recorder.conversations.get((chat_model.agent, model_key), [])
    new = [normalised_message(m) for m in messages]
    for conversation in open_ones:
        if len(new) > len(conversation.messages) and new[: len(conversation.messages)] == conversation.messages:
            return
    if not any(conversation.messages[:1] == new[:1] for conversation in open_ones):
        return  # a new conversation (another system prompt), not a rewritten one
    warnings.warn(
        f"agent {chat_model.agent!r}: the new prompt does not extend the agent's earlier conversation (earlier "
        "turns were changed or removed, e.g. by a multi-agent formatter folding them into one user message), "
        "so its calls train as separate sequences instead of one timeline. Use "
        f"sparring.integrations.TimelineFormatter({chat_model.agent!r}) to keep its replies as assistant turns.",
        HistoryRewriteWarning,
        stacklevel=3,
    )


def warn_if_foreign_turns(chat_model: ChatModel, messages: list[dict]) -> None:
    """Warn when a trainable agent's (formatted, still named) messages hold assistant turns of several speakers."""
    speakers = sorted({m["name"] for m in messages if m["role"] == "assistant" and m.get("name")})
    if chat_model.trainable and len(speakers) > 1:
        warnings.warn(
            f"agent {chat_model.agent!r}: the prompt has assistant turns from {speakers}; the chat template drops "
            "speaker names, so the agent reads all of them as its own replies. Use "
            f"sparring.integrations.TimelineFormatter({chat_model.agent!r}) to make other speakers user turns.",
            ForeignTurnsWarning,
            stacklevel=3,
        )


def _raise_if_cancelled() -> None:
    # A cancel request that an agent caught and ignored is still pending on the task (Python >= 3.11).
    task = asyncio.current_task()
    if task is not None and getattr(task, "cancelling", lambda: 0)() > 0:
        raise EpisodeCancelledError(
            "the episode was cancelled (timed out?); an AgentScope agent ignored it and called its model again"
        )


def _accepts_tool_choice(chat_model: ChatModel) -> bool:
    # sparring's own models all do (local ones force by prefilling); a user's ChatModel may predate the parameter.
    return "tool_choice" in inspect.signature(chat_model.__call__).parameters


def _openai_tool_choice(mode: str) -> str | dict:
    if mode in ("auto", "none", "required"):
        return mode
    return {"type": "function", "function": {"name": mode}}


async def call_chat_model(
    chat_model: ChatModel, messages: list[dict], tools: list[dict] | None, tool_choice: str | None, sampling: dict
) -> ChatResponse:
    """Call `chat_model` with a formatter's messages; `tool_choice` is 'auto', 'none', 'required' or a tool name.

    The tool list is passed unchanged whatever `tool_choice` says, so the
    prompt (and the agent's timeline) stays the same. sparring's chat models
    honour `tool_choice` (local ones by prefilling the start of the call); a
    model without the parameter samples freely, and under 'none' its tool
    calls are dropped.
    """
    warn_if_foreign_turns(chat_model, messages)
    chat_messages = to_chat_messages(messages)
    warn_if_history_rewritten(chat_model, chat_messages)
    if tool_choice is not None and tools and _accepts_tool_choice(chat_model):
        sampling = {**sampling, "tool_choice": _openai_tool_choice(tool_choice)}
        if tool_choice == STRUCTURED_TOOL and getattr(chat_model, "constrains_output", False):
            tools = [_strict(tool) if tool["function"]["name"] == STRUCTURED_TOOL else tool for tool in tools]
    _raise_if_cancelled()
    try:
        response = await chat_model(chat_messages, tools=tools or None, **sampling)
    except asyncio.CancelledError as error:
        raise EpisodeCancelledError("the episode was cancelled (timed out?) during a model call") from error
    if tool_choice == "none" and response.tool_calls:
        response = dataclasses.replace(
            response, message={k: v for k, v in response.message.items() if k != "tool_calls"}
        )
    return response


def _strict(tool: dict) -> dict:
    """The tool marked `strict: true`, so a local model's arguments are held to its schema (structured output)."""
    return {**tool, "function": {**tool["function"], "strict": True}}


@dataclass
class ToolCall:
    """One tool call of a reply, in the shape both AgentScope majors need."""

    id: str
    """Unique across the episode: AgentScope matches results to calls by id, and sparring's parser numbers them per
    reply."""
    name: str
    """The tool's name."""
    arguments: str
    """Arguments as a JSON string (2.x keeps the string, 1.x parses it)."""

    @property
    def parsed(self) -> Any:
        try:
            return json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError:
            return self.arguments


def reply_tool_calls(response: ChatResponse) -> list[ToolCall]:
    """The tool calls of a reply, with ids unique across the episode."""
    calls = []
    for call in response.tool_calls:
        function = call.get("function", call)
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(ToolCall(id=f"call_{uuid.uuid4().hex[:16]}", name=function["name"], arguments=arguments))
    return calls
