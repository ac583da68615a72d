"""Workflows and the model router that gives their agents models.

Two ways to write an episode, one runtime:

- function style: `async def workflow(task, model, auxiliary_models) ->
  WorkflowOutput` (optionally also `logger`); `model` is the trainable
  policy, `auxiliary_models` the frozen ones by name;
- class style: `class W(Workflow)` with `trainable_targets` and `async def
  execute(self, task, tuner)`, where `tuner.chat_model(agent_name,
  target_tag, debug_model)` routes each agent: a trainable model when its tag
  is in `trainable_targets` (every tag when that is None), else the
  `debug_model` — never silently the policy. AgentJet's spelling works as
  is: `trainable_targets` may be declared as a pydantic `Field(default=...)`
  (its default is the value), and `task` is a `WorkflowTask`, the task dict
  that also reads as `workflow_task.task.metadata[...]`.

`ModelRouter` is that routing, and all this layer needs of the `tuner` a
workflow gets. The handle workflows really get is its subclass
`sparring.integrations.TunerHandle` (built by the trainer, the evaluation and
the Ray worker), which adds the framework-facing methods
(`as_openai_client`, `as_base_url_api_key`, `as_agentscope_model`): they need
the OpenAI-compatible server and the AgentScope adapter, both layers above
this one, so they live above it and this layer runs episodes with any router.
For the same reason a function-style workflow (and a judge) gets its models
through `ModelRouter.workflow_model`, which hands them out as they are here
and as AgentScope chat models too in `TunerHandle`.

`as_episode_fn` turns either style into `episode(task, tuner) ->
WorkflowOutput` and checks its signature before any model loads.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic.fields import FieldInfo

from .chat_model import ChatModel
from .types import WorkflowOutput
from .workflow_task import WorkflowTask

FUNCTION_SIGNATURE = (
    "async def workflow(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput"
)
CLASS_SIGNATURE = (
    "class MyWorkflow(Workflow): async def execute(self, workflow_task: WorkflowTask, tuner: TunerHandle) -> "
    "WorkflowOutput"
)


class WorkflowSignatureError(TypeError):
    """A workflow does not have a signature sparring can call; the message shows the expected one."""


class Workflow:
    """Base class of class-style workflows."""

    trainable_targets: list[str] | None = None
    """Tags of the agents that learn; None trains every agent."""
    workflow_args: type | None = None
    """The `sparring.WorkflowArgs` record of this workflow's `workflow_args`, checked when a run is resolved and read
    with ``MyArgs.of(task)``; None: they stay a plain dict."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # AgentJet's workflows are pydantic models: `trainable_targets: List[str] | None = Field(default=[...])`.
        # On this plain class such a declaration would leave a FieldInfo as the value; its default is meant.
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if isinstance(value, FieldInfo):
                setattr(cls, name, value.get_default(call_default_factory=True))

    async def execute(self, workflow_task: WorkflowTask, tuner: ModelRouter) -> WorkflowOutput:
        raise NotImplementedError("subclasses implement execute(workflow_task, tuner)")


@dataclass
class ModelRouter:
    """What a workflow gets to build its agents: trainable models and frozen auxiliary ones, routed by agent tag."""

    policies: dict[str, ChatModel]
    """Trainable models by key ('policy' when one model is trained); scripted baselines in their place when
    evaluating one."""
    auxiliary_models: dict[str, ChatModel] = field(default_factory=dict)
    """Frozen models by the names given in config."""
    trainable_targets: list[str] | None = None
    """Tags routed to a trainable model; None means every tag."""
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("sparring.workflow"))
    """For the workflow's own messages."""

    @property
    def policy(self) -> ChatModel:
        return next(iter(self.policies.values()))

    def workflow_model(self, model: ChatModel) -> ChatModel:
        """`model` as a function-style workflow or a judge receives it: as it is here (`TunerHandle` adds
        AgentScope's form)."""
        return model

    def workflow_auxiliary_models(self) -> dict[str, ChatModel]:
        """The auxiliary models by name, as a function-style workflow or a judge receives them."""
        return {name: self.workflow_model(model) for name, model in self.auxiliary_models.items()}

    def is_trainable(self, target_tag: str) -> bool:
        return self.trainable_targets is None or target_tag in self.trainable_targets

    def chat_model(
        self,
        agent_name: str,
        target_tag: str | None = None,
        debug_model: ChatModel | str | None = None,
        model: str | None = None,
    ) -> ChatModel:
        """The model for one agent: trainable if its tag is a trainable target, else `debug_model`.

        `model` picks one of several trainable models by key; `debug_model` may be a ChatModel or the name of
        an auxiliary model.
        """
        tag = target_tag or agent_name
        if self.is_trainable(tag):
            if model is not None and model not in self.policies:
                raise KeyError(f"no trainable model {model!r}; trainable models are {sorted(self.policies)}")
            return (self.policies[model] if model else self.policy).as_agent(agent_name, tag)
        if debug_model is None:
            raise ValueError(
                f"agent {agent_name!r} (tag {tag!r}) is not a trainable target {self.trainable_targets} "
                "and has no debug_model to run it"
            )
        frozen = self.auxiliary_models[debug_model] if isinstance(debug_model, str) else debug_model
        return frozen.as_agent(agent_name, tag)


EpisodeFn = Callable[[dict, ModelRouter], Any]


def as_episode_fn(workflow: Callable | type | Workflow) -> EpisodeFn:
    """Check a function- or class-style workflow and return `episode(task, tuner)`."""
    if isinstance(workflow, type) and issubclass(workflow, Workflow):
        instance = workflow()
    elif isinstance(workflow, Workflow):
        instance = workflow
    else:
        instance = None
    if instance is not None:
        if instance.trainable_targets is not None and len(instance.trainable_targets) == 0:
            raise WorkflowSignatureError(
                f"{type(instance).__name__}.trainable_targets is []: nothing would train; use None to train every agent"
            )
        if not inspect.iscoroutinefunction(instance.execute):
            raise WorkflowSignatureError(f"{type(instance).__name__}.execute must be async; expected {CLASS_SIGNATURE}")

        async def run_class(task: dict, tuner: ModelRouter):
            tuner.trainable_targets = instance.trainable_targets
            return await instance.execute(WorkflowTask(task), tuner)

        return run_class
    if not callable(workflow) or not inspect.iscoroutinefunction(workflow):
        what = (
            f"{workflow.__qualname__}"
            if callable(workflow) and hasattr(workflow, "__qualname__")
            else f"a {type(workflow).__name__}"
        )
        raise WorkflowSignatureError(
            f"{what} is not an async function or Workflow subclass; expected {FUNCTION_SIGNATURE}"
        )
    parameters = inspect.signature(workflow).parameters
    positional = [p for p in parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    extra_required = [p.name for p in list(parameters.values())[3:] if p.default is p.empty and p.name != "logger"]
    if len(positional) < 3 or extra_required:
        raise WorkflowSignatureError(
            f"{workflow.__name__}{inspect.signature(workflow)} does not match; expected "
            f"{FUNCTION_SIGNATURE} (optionally with a `logger` parameter)"
        )
    wants_logger = "logger" in parameters

    async def run_function(task: dict, tuner: ModelRouter):
        extra = {"logger": tuner.logger} if wants_logger else {}
        return await workflow(task, tuner.workflow_model(tuner.policy), tuner.workflow_auxiliary_models(), **extra)

    return run_function
