"""A workflow's `workflow_args` as a typed record, checked when the run is resolved instead of read with `.get`.

A game declares its arguments as a `WorkflowArgs` subclass, one field per
argument with its type, default and a docstring saying what it does, and
points its workflow at it: `@takes_args(MyArgs)` on a function-style workflow,
the class attribute `workflow_args = MyArgs` on a `Workflow` subclass. The
workflow reads them typed with ``MyArgs.of(task)``.

`resolve_run` checks the config's `workflow_args` (training, eval and
validation datasets) against the record right after importing the workflow,
before any data or model loads, and then every task's merged arguments: a
misspelt key is an error naming it and the closest valid name
(``train_dataset.workflow_args.max_turn: unknown field; did you mean
max_turns?``), a wrong type an error naming the key. A workflow that declares
nothing gets its arguments as the plain dict it always did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from .schema import ConfigError, ConfigRecord, describe_validation_error

if TYPE_CHECKING:
    from .config import TuneConfig

F = TypeVar("F")
OPPONENT_ARG = "opponent"
"""The workflow argument that names an episode's drawn opponent (its chat model is the auxiliary model of that name);
the league sets it, so a record of a game played in a league has this field."""
ARGS_ATTRIBUTE = "workflow_args"
"""The attribute of a workflow (function, class or instance) that names its `WorkflowArgs` record."""


class WorkflowArgs(ConfigRecord):
    """Base of a workflow's typed arguments: an unknown key, a wrong type or a value out of range is an error that
    names the key; each field's docstring is its documentation."""

    @classmethod
    def of(cls, task: Mapping[str, Any]):
        """The task's `workflow_args` as this record (its defaults where the task gives none); ConfigError naming
        ``workflow_args.<key>`` when they do not fit."""
        return check_workflow_args(cls, task.get(ARGS_ATTRIBUTE) or {}, "workflow_args")


def takes_args(record: type[WorkflowArgs]) -> Callable[[F], F]:
    """Declare `record` as a function-style workflow's `workflow_args` (a `Workflow` subclass sets the class
    attribute ``workflow_args = record`` instead); the workflow is returned as it is."""
    if not (isinstance(record, type) and issubclass(record, WorkflowArgs)):
        raise TypeError(f"takes_args({record!r}): give a WorkflowArgs subclass")

    def declare(workflow: F) -> F:
        setattr(workflow, ARGS_ATTRIBUTE, record)
        return workflow

    return declare


def declared_args(workflow: Any) -> type[WorkflowArgs] | None:
    """The `WorkflowArgs` record `workflow` declares, or None (its arguments stay a plain dict)."""
    record = getattr(workflow, ARGS_ATTRIBUTE, None)
    if record is None:
        return None
    if not (isinstance(record, type) and issubclass(record, WorkflowArgs)):
        name = getattr(workflow, "__qualname__", type(workflow).__name__)
        raise ConfigError(f"workflow: {name}.{ARGS_ATTRIBUTE} is {record!r}, not a WorkflowArgs subclass")
    return record


def check_workflow_args(record: type[WorkflowArgs], args: Any, where: str) -> WorkflowArgs:
    """`args` validated as `record`; ConfigError whose one line names each bad key as ``<where>.<key>``."""
    if not isinstance(args, Mapping):
        raise ConfigError(f"{where}: must be an object of {record.__name__}'s fields, got {type(args).__name__}")
    try:
        return record.model_validate(dict(args))
    except ValidationError as err:
        lines = describe_validation_error(err, record)  # one per error, starting with its location when it has one
        placed = zip(err.errors(), lines, strict=True)
        problems = [f"{where}.{line}" if error["loc"] else f"{where}: {line}" for error, line in placed]
        raise ConfigError("; ".join(problems), problems) from None


def check_config_args(config: TuneConfig, record: type[WorkflowArgs]) -> None:
    """The config's `workflow_args` (every dataset's) fit `record`, and a league's drawn opponent has its field."""
    sections = {"train_dataset": config.train_dataset, "eval_dataset": config.eval_dataset}
    if config.validation is not None:
        sections["validation.dataset"] = config.validation.dataset
    for where, dataset in sections.items():
        if dataset is not None:
            check_workflow_args(record, dataset.workflow_args, f"{where}.workflow_args")
    if config.league is not None and OPPONENT_ARG not in record.model_fields:
        raise ConfigError(
            f"league: the league hands each episode its opponent as workflow_args.{OPPONENT_ARG}, "
            f"but the workflow's {record.__name__} has no field {OPPONENT_ARG!r}; add `{OPPONENT_ARG}: str`"
        )


def check_task_args(record: type[WorkflowArgs], tasks: Sequence[Mapping[str, Any]], origin: str) -> None:
    """Every task's (merged) `workflow_args` fits `record`; ConfigError naming the first task that does not."""
    for index, task in enumerate(tasks):
        try:
            check_workflow_args(record, task.get(ARGS_ATTRIBUTE) or {}, "workflow_args")
        except ConfigError as error:
            raise ConfigError(f"{origin}: task {task.get('task_id', index)}: {error}") from None
