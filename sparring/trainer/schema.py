"""The records a job config and a workflow's arguments are made of: the record base and its errors, the bounds of
a config's numbers, a workflow's `workflow_args` as a typed record; and the threads a run leaves running.

`ConfigRecord` is the base of every config record (`config.py`, `sections.py`): an unknown key is an error, a float
must be finite, and a failed validation raises `ConfigError` whose message is one line that starts with the field's
dotted path (and the file, when loading one), e.g. ``job.yaml: algorithm.group_size: Input should be less than or
equal to 1024 (got 1000000000000)``; several problems share that line, separated by ``; ``. `child_annotation` walks
the schema one dotted key at a time, so an unknown field -- in a validation error or a ``--set`` override -- is
reported with the closest valid key ("did you mean"), or the keys that would have worked when none is close.

The `MAX_*` bounds: every number a job config holds has one, far beyond any sane run and low enough that a typo --
an extra zero, `group_size: 1e12` -- is refused before anything runs; the field's error message states its bound,
and the generated configuration reference shows it. `is_import_path` tells an import path from a registry's name
(resolving one is `config_file.import_object`).

A workflow's `workflow_args` as a typed record, checked when the run is resolved instead of read with `.get`. A game
declares its arguments as a `WorkflowArgs` subclass, one field per argument with its type, default and a docstring
saying what it does, and points its workflow at it: `@takes_args(MyArgs)` on a function-style workflow, the class
attribute `workflow_args = MyArgs` on a `Workflow` subclass. The workflow reads them typed with ``MyArgs.of(task)``.
`resolve_run` checks the config's `workflow_args` (training, eval and validation datasets) against the record right
after importing the workflow, before any data or model loads (`config.check_config_args`), and then every task's
merged arguments (`check_task_args`): a misspelt key is an error naming it and the closest valid name
(``train_dataset.workflow_args.max_turn: unknown field; did you mean max_turns?``), a wrong type an error naming the
key. A workflow that declares nothing gets its arguments as the plain dict it always did.

Threads left running: Python waits for every non-daemon thread before a process exits, so one thread a workflow
started and left running (a server, a poller, an `Event().wait()`) would keep `sparring train` alive after its run
finished. `lingering_threads` names them; the command line reports them and exits without waiting
(`sparring.cli.main`), and `run_training` warns about them when it returns. They are here because this is the
trainer's lowest module and imports nothing heavy: the command line asks on every exit, a config error's included.
"""

from __future__ import annotations

import difflib
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

if TYPE_CHECKING:
    pass


class ConfigError(ValueError):
    """A configuration value, file or override is invalid; the message is one line that names the field path."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems) or [message]
        """Each problem on its own, starting with its field path: several when one validation found several."""


class _RaisesConfigError(type(BaseModel)):
    """Turns a failed `SomeConfig(...)` call into ConfigError naming the field path.

    Wrapping the call (not `__init__`) leaves nested validation untouched:
    pydantic validates nested configs without calling the class, so their
    errors keep their full location.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as err:
            raise _config_error(err, cls) from None


class ConfigRecord(BaseModel, metaclass=_RaisesConfigError):
    """Base of all configs: unknown keys are errors and validation errors name the field path."""

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, protected_namespaces=(), use_attribute_docstrings=True
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | None = None):
        """Validate a plain dict (from YAML or JSON); `source` (a file name) prefixes the error message."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise _config_error(err, cls, source) from None


def _config_error(err: ValidationError, root: type[BaseModel], source: str | None = None) -> ConfigError:
    problems = describe_validation_error(err, root)
    prefix = f"{source}: " if source else ""
    return ConfigError(prefix + "; ".join(problems), problems)


def describe_validation_error(err: ValidationError, root: type[BaseModel]) -> list[str]:
    """One line per problem, each starting with the dotted field path."""
    lines = []
    for error in err.errors():
        location = ".".join(str(part) for part in error["loc"])
        message = error["msg"]
        if error["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        elif error["type"] == "extra_forbidden":
            message = unknown_field(str(error["loc"][-1]), _valid_keys_at(root, error["loc"][:-1]), "here")
        elif error["type"] != "missing":
            message = f"{message} (got {short_repr(error['input'])})"
        lines.append(f"{location}: {message}" if location else message)
    return lines


def short_repr(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap_optional(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap_optional(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        members = [member for member in get_args(annotation) if member is not type(None)]
        return _unwrap_optional(members[0]) if len(members) == 1 else annotation
    return annotation


def _is_config_class(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def child_annotation(annotation: Any, key: str, path: Sequence[str]) -> Any:
    """The declared type of `key` inside a value of type `annotation`, or ConfigError naming `path`."""
    annotation = _unwrap_optional(annotation)
    dotted = ".".join(path)
    if _is_config_class(annotation):
        if key not in annotation.model_fields:
            parent = ".".join(path[:-1]) or "the top level"
            raise ConfigError(f"{dotted}: {unknown_field(key, current_keys(annotation), f'at {parent}')}")
        return annotation.model_fields[key].annotation
    if annotation is dict or annotation is Any:
        return Any
    if get_origin(annotation) is dict:
        return get_args(annotation)[1]
    raise ConfigError(f"{dotted}: {'.'.join(path[:-1])} holds a single value, not fields")


def _valid_keys_at(root: type[BaseModel], location: Sequence[Any]) -> list[str]:
    annotation: Any = root
    for depth, key in enumerate(location):
        annotation = child_annotation(annotation, str(key), [str(part) for part in location[: depth + 1]])
    annotation = _unwrap_optional(annotation)
    return current_keys(annotation) if _is_config_class(annotation) else []


def current_keys(record: type[BaseModel]) -> list[str]:
    """The keys `record` offers: its fields but the deprecated ones kept for old files (`exclude=True`)."""
    return [name for name, info in record.model_fields.items() if not info.exclude]


def unknown_field(key: str, valid: Sequence[str], where: str) -> str:
    """'unknown field; did you mean X?' with the closest valid name, else the valid names `where` ('at algorithm')."""
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        return f"unknown field; did you mean {close[0]}?"
    return f"unknown field; valid fields {where}: {', '.join(valid) or 'any'}"


MAX_STEPS = 1_000_000
MAX_EPOCHS = 100_000
MAX_TASKS = 100_000_000
MAX_SEED = 2**32 - 1
MAX_CONTEXT_TOKENS = 1_048_576
MAX_NEW_TOKENS = 131_072
MAX_TEMPERATURE = 10.0
MAX_VOCABULARY = 1_048_576
MAX_LORA_RANK = 1024
MAX_LEARNING_RATE = 1.0
MAX_GROUP_SIZE = 1024
MAX_BATCH_SIZE = 4096
MAX_EPISODES_PER_STEP = 65_536
MAX_COEFFICIENT = 100.0
MAX_GRAD_CLIP_NORM = 1e6
MAX_CONCURRENCY = 4096
MAX_EPISODE_TIMEOUT_S = 86_400.0
MAX_ABS_REWARD = 1e6
MAX_RAY_CPUS = 1024.0
MAX_STALENESS = 16


def is_import_path(text: str) -> bool:
    """Whether a name is written as an import path: it has a ':' or a '.', which no registered built-in name has."""
    return ":" in text or "." in text


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


def check_task_args(record: type[WorkflowArgs], tasks: Sequence[Mapping[str, Any]], origin: str) -> None:
    """Every task's (merged) `workflow_args` fits `record`; ConfigError naming the first task that does not."""
    for index, task in enumerate(tasks):
        try:
            check_workflow_args(record, task.get(ARGS_ATTRIBUTE) or {}, "workflow_args")
        except ConfigError as error:
            raise ConfigError(f"{origin}: task {task.get('task_id', index)}: {error}") from None


def lingering_threads() -> list[str]:
    """The names of the live non-daemon threads besides the main one: those the interpreter would wait for at exit."""
    main = threading.main_thread()
    return sorted(
        thread.name
        for thread in threading.enumerate()
        if thread is not main and thread.is_alive() and not thread.daemon
    )


def lingering_warning(threads: list[str]) -> str:
    return f"{len(threads)} thread(s) left running (started by the workflow?), not waited for: {', '.join(threads)}"
