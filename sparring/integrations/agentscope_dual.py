"""`SparringSide`: the sparring half of a model that is both a sparring chat model and an AgentScope one.

A function-style workflow written for AgentScope's tuner hands the `model`
and `auxiliary_models[...]` it receives straight to AgentScope agents
(`ReActAgent(model=model, ...)`), while sparring's own workflows call the
same objects as sparring chat models (`await model(messages)`,
`model.as_agent(name)`). When AgentScope is installed, each major's
`DualChatModel` (in `agentscope_v1` / `agentscope_v2`) serves both: it is that
major's `AgentScopeChatModel` adapter, and this mixin gives it the sparring
`ChatModel` interface by delegating to the routed model it wraps. Its
`__call__` tells the two callers apart by what they pass (see each major's
`DualChatModel`); the sparring-side call goes here.
"""

from __future__ import annotations

import abc
from typing import Any

from ..rollout.chat_model import ChatModel, ChatResponse
from ..rollout.recorder import EpisodeRecorder


class SparringSide(ChatModel):
    """The sparring `ChatModel` interface of a `DualChatModel`, delegated to `chat_model`."""

    chat_model: ChatModel
    """The routed sparring model (trainable policy or frozen); set by the AgentScope adapter's `__init__`."""

    @property
    def agent(self) -> str:
        return self.chat_model.agent

    @property
    def role(self) -> str | None:
        return self.chat_model.role

    @property
    def trainable(self) -> bool:
        return self.chat_model.trainable

    @property
    def renderer(self):
        return self.chat_model.renderer

    async def sparring_call(
        self, messages: list[dict], tools: list[dict] | None, tool_choice: str | dict | None, sampling: dict
    ) -> ChatResponse:
        """A sparring-style call: the wrapped model's reply, a sparring `ChatResponse`."""
        if tool_choice is not None:  # only then: a model written without the parameter still serves the rest
            sampling = {**sampling, "tool_choice": tool_choice}
        return await self.chat_model(messages, tools, **sampling)

    async def generate(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        n: int = 1,
        recorder: EpisodeRecorder | None = None,
        **sampling: Any,
    ) -> list[ChatResponse]:
        return await self.chat_model.generate(
            messages, tools, tool_choice=tool_choice, n=n, recorder=recorder, **sampling
        )

    def as_agent(self, agent: str, role: str | None = None) -> ChatModel:
        """This model under another agent name (and role), still both kinds of model."""
        return self.with_chat_model(self.chat_model.as_agent(agent, role))

    @abc.abstractmethod
    def with_chat_model(self, chat_model: ChatModel) -> SparringSide:
        """A copy of this model (same AgentScope options) over `chat_model`."""
