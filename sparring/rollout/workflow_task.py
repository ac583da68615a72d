"""`WorkflowTask`: the task a class-style workflow's `execute` receives, readable in AgentJet's spelling too.

sparring hands a workflow its task as a plain dict (`task["seed"]`).
AgentJet's workflows read the same row as `workflow_task.task.metadata[...]`
(and `.task.main_query`, `.task.task_id`), so `Workflow.execute` gets a
`WorkflowTask`: the task dict itself (every dict use keeps working), with
`.task` giving AgentJet's `Task` view of it. The view follows AgentJet's
task readers: `metadata` is the row's own ``metadata`` object when it has
one, else the whole row; `main_query` is ``main_query`` (or a Hugging Face
row's ``question``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """AgentJet's view of one task row (`workflow_task.task`)."""

    main_query: str = ""
    """The task's question or instruction: the row's ``main_query``, else its ``question``, else ''."""
    init_messages: list[dict] = field(default_factory=list)
    """Messages an episode starts from (the row's ``init_messages``), empty when it has none."""
    task_id: str = ""
    """The task's id (sparring gives every task one: its index unless the row names it)."""
    env_type: str = ""
    """The row's ``env_type`` (AgentJet's environment service kind), '' when it has none."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The row's ``metadata`` object when it has one, else the whole row: where AgentJet workflows read their fields."""


class WorkflowTask(dict):
    """A task dict that also reads as AgentJet's `WorkflowTask` (`.task.metadata[...]`, `.task_id`)."""

    @property
    def task(self) -> Task:
        metadata = self.get("metadata")
        return Task(
            main_query=str(self.get("main_query", self.get("question", ""))),
            init_messages=list(self.get("init_messages") or []),
            task_id=str(self.get("task_id", "")),
            env_type=str(self.get("env_type", "")),
            metadata=metadata if isinstance(metadata, dict) else self,
        )

    @property
    def task_id(self) -> str:
        return str(self.get("task_id", ""))
