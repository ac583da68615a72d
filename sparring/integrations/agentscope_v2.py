"""AgentScope 2.x adapter: a `ChatModelBase` over a sparring chat model, and the timeline-keeping formatter.

A 2.x `Agent` hands the model its context as `Msg` objects with a
`ToolChoice`; the model formats them with its own `formatter` inside
`_call_api`. `AgentScopeChatModel` formats with a `TimelineFormatter` for its
agent unless given another formatter, calls the sparring model, and returns a
complete (non-streaming) `ChatResponse` of `TextBlock`s and `ToolCallBlock`s.
Structured output needs nothing extra: the base class and the agent ask for
their structured-output tool through `tool_choice`.

2.x agents inject the wall-clock time into their context by default
(`InjectionConfig.inject_runtime_state`). The `TimelineFormatter` leaves it out
of the prompt: otherwise the policy would learn from, and every episode would
start with, a different timestamp.
"""

from __future__ import annotations

import re
import time
from typing import Any

from agentscope.credential import CredentialBase
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import HintBlock, Msg, TextBlock, ToolCallBlock
from agentscope.model import ChatModelBase, ChatResponse, ChatUsage
from agentscope.tool import ToolChoice
from pydantic import BaseModel, Field

from ..rollout.chat_model import ChatModel
from .agentscope_bridge import call_chat_model, own_turns, reply_tool_calls
from .agentscope_dual import SparringSide

# Runtime-state hints are `<key>value</key>` lines; these two keys only carry the wall clock.
_TIME_FIELD = re.compile(r"<(current-time|timezone)>.*?</\1>\n?", re.DOTALL)
_OTHER_RUNTIME_FIELDS = ("<tasks>", "<context-length>", "<tool-error>")


class AgentScopeChatModel(ChatModelBase):
    """An AgentScope 2.x chat model whose calls go to a sparring `ChatModel` (recorded when it is trainable)."""

    class Parameters(BaseModel):
        """Sampling parameters for every call; None leaves the sparring model's default."""

        temperature: float | None = Field(default=None, ge=0)
        """Softmax temperature (0 is greedy)."""
        top_p: float | None = Field(default=None, gt=0, le=1)
        """Nucleus sampling mass."""
        top_k: int | None = Field(default=None, ge=0)
        """Keep only the k most likely tokens."""
        max_tokens: int | None = Field(default=None, gt=0)
        """Most new tokens per call."""
        seed: int | None = None
        """Seed for reproducible sampling."""

    type: str = "sparring"

    def __init__(
        self,
        chat_model: ChatModel,
        formatter: OpenAIChatFormatter | None = None,
        parameters: Parameters | None = None,
        context_size: int = 32768,
    ):
        super().__init__(
            credential=CredentialBase(name="sparring"),
            model=f"sparring/{chat_model.agent}",
            parameters=parameters or self.Parameters(),
            stream=False,
            max_retries=0,
            context_size=context_size,
        )
        self.chat_model = chat_model
        """The routed sparring model: the trainable policy or a frozen one."""
        self.formatter = formatter or TimelineFormatter(chat_model.agent)
        """Turns the agent's `Msg` context into OpenAI-style messages."""

    async def _call_api(
        self,
        model_name: str,
        messages: list[Msg],
        tools: list[dict] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self._validate_tool_choice(tool_choice, tools)
        if tool_choice is not None and tool_choice.tools:
            tools = [tool for tool in tools or [] if tool["function"]["name"] in tool_choice.tools]
        formatted = await self.formatter.format(messages)
        sampling = {**self.parameters.model_dump(exclude_none=True), **kwargs}
        started = time.perf_counter()
        response = await call_chat_model(
            self.chat_model, formatted, tools, tool_choice.mode if tool_choice else None, sampling
        )
        calls = reply_tool_calls(response)
        content: list = [TextBlock(text=response.content)] if response.content or not calls else []
        content += [ToolCallBlock(id=c.id, name=c.name, input=c.arguments) for c in calls]
        usage = ChatUsage(
            input_tokens=response.prompt_tokens, output_tokens=len(response.tokens), time=time.perf_counter() - started
        )
        return ChatResponse(content=content, is_last=True, usage=usage)


class DualChatModel(AgentScopeChatModel, SparringSide):
    """Both a sparring `ChatModel` and an AgentScope 2.x `ChatModelBase` over `chat_model`: what workflows receive.

    AgentScope calls it with `Msg` objects (or a `ToolChoice`) and gets an
    AgentScope `ChatResponse`; sparring calls it with message dicts and gets
    a sparring `ChatResponse`. It formats every message as it is (its
    `TimelineFormatter` has no agent name) until `as_agent(name)` names the
    agent whose replies are its own.
    """

    def __init__(
        self,
        chat_model: ChatModel,
        formatter: OpenAIChatFormatter | None = None,
        parameters: AgentScopeChatModel.Parameters | None = None,
        context_size: int = 32768,
    ):
        super().__init__(
            chat_model, formatter=formatter or TimelineFormatter(None), parameters=parameters, context_size=context_size
        )

    async def __call__(
        self,
        messages: list,
        tools: list[dict] | None = None,
        tool_choice: ToolChoice | str | dict | None = None,
        **kwargs: Any,
    ):
        if isinstance(tool_choice, ToolChoice) or any(isinstance(message, Msg) for message in messages or []):
            return await super().__call__(messages, tools, tool_choice, **kwargs)
        return await self.sparring_call(messages, tools, tool_choice, kwargs)

    def with_chat_model(self, chat_model: ChatModel) -> DualChatModel:
        formatter = self.formatter
        if isinstance(formatter, TimelineFormatter):
            formatter = formatter.model_copy(update={"agent_name": chat_model.agent})
        return DualChatModel(
            chat_model, formatter=formatter, parameters=self.parameters, context_size=self.context_size
        )


class TimelineFormatter(OpenAIChatFormatter):
    """`OpenAIChatFormatter` that keeps `agent_name`'s replies as assistant turns and others' as "Name: text" user
    turns.

    Text only (the sparring renderer's input), and without the injected wall-clock time unless `keep_time`.
    """

    agent_name: str | None = None
    """The agent whose own replies stay assistant turns (its `name`); None keeps every assistant message."""
    keep_time: bool = False
    """Keep the wall-clock time that 2.x agents inject into their context."""
    input_types: list[str] = Field(default_factory=lambda: ["text/plain"])
    """Text only: the sparring renderer renders text (agents turn other inputs into text notes)."""

    def __init__(self, agent_name: str | None = None, **data: Any):
        super().__init__(agent_name=agent_name, **data)

    async def format(self, msgs: list[Msg]) -> list[dict[str, Any]]:
        if not self.keep_time:
            msgs = [_without_time(msg) for msg in msgs]
        return own_turns(await super().format(msgs), self.agent_name)


def _without_time(msg: Msg) -> Msg:
    """A copy of `msg` without wall-clock fields in its hints (the agent's own context is left untouched)."""
    if not any(_is_timed(block) for block in msg.get_content_blocks()):
        return msg
    blocks = []
    for block in msg.get_content_blocks():
        if _is_timed(block):
            if not any(field in block.hint for field in _OTHER_RUNTIME_FIELDS):
                continue
            block = block.model_copy(update={"hint": _TIME_FIELD.sub("", block.hint)})
        blocks.append(block)
    return msg.model_copy(update={"content": blocks})


def _is_timed(block: Any) -> bool:
    return isinstance(block, HintBlock) and isinstance(block.hint, str) and "<current-time>" in block.hint
