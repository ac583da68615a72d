"""Scripted tic-tac-toe players and one workflow episode run to its end: what the tic-tac-toe tests drive the
coordinator and the workflow with (tests/test_tictactoe_*.py)."""

import asyncio
from dataclasses import dataclass, field

from sparring import ChatModel, ChatResponse
from sparring.envs.tictactoe import tictactoe


@dataclass(eq=False)
class Scripted(ChatModel):
    """A chat model that replies with the next of its scripted texts and remembers what it was shown."""

    replies: list[str] = field(default_factory=list)
    seen: list[list[dict]] = field(default_factory=list)
    agent: str = "scripted"
    role: str | None = None

    async def __call__(self, messages, tools=None, **sampling):
        self.seen.append([dict(m) for m in messages])
        return ChatResponse(message={"role": "assistant", "content": self.replies[len(self.seen) - 1]})


def run_workflow(task, model, auxiliary_models=None):
    return asyncio.run(tictactoe(task, model, auxiliary_models or {}))
