"""AgentScope 1.x adapter: a `ChatModelBase` over a sparring chat model, and the timeline-keeping formatter.

A 1.x agent (e.g. `ReActAgent`) formats its memory with its own formatter
and calls `model(messages, tools=..., tool_choice=...)`, or
`model(messages, structured_model=...)` for a one-off structured answer.
`AgentScopeChatModel` hands the OpenAI-style messages to the sparring model
and returns a non-streaming `ChatResponse` of `TextBlock`s and `ToolUseBlock`s.
Structured output rides on a tool call: `ReActAgent` registers its
`generate_response` tool and asks for it with `tool_choice`; a direct
`structured_model` call offers one `generate_structured_output` tool and puts
its parsed arguments in `ChatResponse.metadata`.
"""

from __future__ import annotations

from typing import Any

from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolUseBlock
from agentscope.model import ChatModelBase, ChatResponse
from pydantic import BaseModel

from ..rollout.chat_model import ChatModel
from .agentscope_bridge import STRUCTURED_TOOL, call_chat_model, own_turns, reply_tool_calls
from .agentscope_dual import SparringSide


class AgentScopeChatModel(ChatModelBase):
    """An AgentScope 1.x chat model whose calls go to a sparring `ChatModel` (recorded when it is trainable)."""

    def __init__(self, chat_model: ChatModel, generate_kwargs: dict | None = None):
        super().__init__(model_name=f"sparring/{chat_model.agent}", stream=False)
        self.chat_model = chat_model
        """The routed sparring model: the trainable policy or a frozen one."""
        self.generate_kwargs = dict(generate_kwargs or {})
        """Sampling parameters for every call (temperature, max_tokens, ...); a call's own kwargs win."""

    async def __call__(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        tool_choice: str | None = None,
        structured_model: type[BaseModel] | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        if structured_model is not None:
            tools = [_structured_tool(structured_model)]
            tool_choice = STRUCTURED_TOOL
        if tool_choice is not None:
            self._validate_tool_choice(tool_choice, tools)
        response = await call_chat_model(
            self.chat_model, messages, tools, tool_choice, {**self.generate_kwargs, **kwargs}
        )
        calls = reply_tool_calls(response)
        content: list = [TextBlock(type="text", text=response.content)] if response.content or not calls else []
        content += [
            ToolUseBlock(type="tool_use", id=c.id, name=c.name, input=c.parsed, raw_input=c.arguments) for c in calls
        ]
        metadata = None
        if structured_model is not None:
            metadata = next((c.parsed for c in calls if c.name == STRUCTURED_TOOL and isinstance(c.parsed, dict)), None)
        # No usage: AgentScope 1.x does not export its ChatUsage type.
        return ChatResponse(content=content, metadata=metadata)


class DualChatModel(AgentScopeChatModel, SparringSide):
    """Both a sparring `ChatModel` and an AgentScope 1.x `ChatModelBase` over `chat_model`: what workflows receive.

    Both kinds of caller pass message dicts, so the messages' shape decides:
    AgentScope's OpenAI formatters give every message but tool results its
    content as a list of parts (`formatted_by_agentscope`), or the call asks
    for a `structured_model`: such a call gets an AgentScope `ChatResponse`;
    any other call (string contents, as sparring's workflows write them) is a
    sparring call and gets a sparring `ChatResponse`.
    """

    async def __call__(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        tool_choice: str | dict | None = None,
        structured_model: type[BaseModel] | None = None,
        **kwargs: Any,
    ):
        if structured_model is not None or formatted_by_agentscope(messages):
            return await super().__call__(messages, tools, tool_choice, structured_model, **kwargs)
        return await self.sparring_call(messages, tools, tool_choice, kwargs)

    def with_chat_model(self, chat_model: ChatModel) -> DualChatModel:
        return DualChatModel(chat_model, generate_kwargs=self.generate_kwargs)


def formatted_by_agentscope(messages: list[dict]) -> bool:
    """Whether `messages` have the shape AgentScope 1.x's OpenAI formatters give: list contents (None for a bare
    tool call)."""
    contents = [
        message.get("content") for message in messages if isinstance(message, dict) and message.get("role") != "tool"
    ]
    return any(isinstance(content, list) for content in contents) and all(
        content is None or isinstance(content, list) for content in contents
    )


def _structured_tool(structured_model: type[BaseModel]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": STRUCTURED_TOOL,
            "description": "Call this function to give the structured output required by the user.",
            "parameters": structured_model.model_json_schema(),
        },
    }


class TimelineFormatter(OpenAIChatFormatter):
    """`OpenAIChatFormatter` that keeps `agent_name`'s replies as assistant turns and others' as "Name: text" user
    turns."""

    def __init__(self, agent_name: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.agent_name = agent_name
        """The agent whose own replies stay assistant turns (its `name`)."""

    async def _format(self, msgs: list[Msg]) -> list[dict[str, Any]]:
        return own_turns(await super()._format(msgs), self.agent_name)
