"""Scripted chat models: a plain Python policy in the trainable slot, for baselines.

`ScriptedChatModel(policy)` answers every call with `policy(messages, rng)`
(a function or coroutine function returning the reply text, or a whole
assistant message dict) and returns it as a `ChatResponse`, so a workflow
cannot tell it from a sampled model: it goes where the trainable model goes
(the `model` argument of a function workflow, the trainable targets of a
class workflow) and plays through the same code. No model runs, no token is
made up: its calls are counted on the episode's recorder as calls of the
policy's slot (`EpisodeRecorder.record_scripted_call`), so the runner gives
its agents the episode's reward and metrics, but they have no tokens and
nothing is ever trained on them.

In an episode that has a sampling seed (`run_episodes(seed=...)`, as every
run and evaluation gives) each call draws from a `random.Random` seeded like
a sampled call (the episode's seed, the agent, the call's number), so a
baseline's games do not depend on how episodes interleave; elsewhere all
agents of one scripted model (`as_agent` copies) share its `rng`. With
`baseline=False` the same model plays a frozen part instead (a scripted
answerer or opponent among the auxiliary models): its calls are only
transcribed, like a frozen model's.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .chat_model import ChatModel, ChatResponse, check_messages
from .recorder import current_recorder

ScriptedPolicy = Callable[[list[dict], random.Random], str | dict | Awaitable[str | dict]]
"""`policy(messages, rng) -> reply text` (or an assistant message dict, or an awaitable of either)."""


@dataclass(eq=False)
class ScriptedChatModel(ChatModel):
    """A chat model whose replies come from a Python policy: never trained, rewarded like the policy it stands in
    for."""

    policy: ScriptedPolicy
    """Maps the conversation so far (and a random generator) to the reply."""
    name: str = "scripted"
    """The baseline's name, for transcripts and tables."""
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    """Randomness handed to the policy outside a seeded episode; shared by every agent copy of this model."""
    agent: str = "policy"
    """Name the calls are counted and transcribed under."""
    role: str | None = None
    """The agent's role (target tag), as for a trainable model."""
    baseline: bool = True
    """True in the trainable slot (its agents are rewarded); False for a scripted auxiliary model (an answerer),
    only transcribed."""

    @classmethod
    def seeded(
        cls, policy: ScriptedPolicy, name: str = "scripted", seed: int = 0, baseline: bool = True
    ) -> ScriptedChatModel:
        """A scripted model whose generator starts from `seed`."""
        return cls(policy, name=name, rng=random.Random(seed), baseline=baseline)

    async def __call__(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        **sampling: Any,
    ) -> ChatResponse:
        check_messages(messages)
        recorder = current_recorder()
        seed = recorder.call_seed(self.agent) if recorder is not None else None
        rng = self.rng if seed is None else random.Random(seed)
        reply = self.policy(
            [dict(message) for message in messages], rng
        )  # copies: a policy cannot alter the workflow's history
        reply = await reply if inspect.isawaitable(reply) else reply
        if isinstance(reply, str):
            message = {"role": "assistant", "content": reply}
        elif isinstance(reply, dict) and reply.get("role") == "assistant":
            message = dict(reply)
        else:
            raise TypeError(
                f"scripted policy {self.name!r} returned {reply!r}; it must return the reply text or an "
                "assistant message dict"
            )
        if recorder is not None:
            entry = {
                "messages": list(messages),
                "response": message,
                "trainable": False,
                "scripted": self.name,
                "prompt_tokens": 0,
                "completion_tokens": 0,
            }
            if self.baseline:
                recorder.record_scripted_call(self.agent, self.role, entry)
            else:
                recorder.add_transcript(self.agent, entry)
        return ChatResponse(message=message)
