"""The ground every job config stands on: the record base and its errors, the bounds of its numbers, import paths.

`ConfigRecord` is the base of every config record (`config.py`, `sections.py`): an unknown key is an error, a float
must be finite, and a failed validation raises `ConfigError` whose message is one line that starts with the field's
dotted path (and the file, when loading one), e.g. ``job.yaml: algorithm.group_size: Input should be less than or
equal to 1024 (got 1000000000000)``; several problems share that line, separated by ``; ``. `child_annotation` walks
the schema one dotted key at a time, so an unknown field -- in a validation error or a ``--set`` override -- is
reported with the closest valid key ("did you mean"), or the keys that would have worked when none is close.

The `MAX_*` bounds: every number a job config holds has one, far beyond any sane run and low enough that a typo --
an extra zero, `group_size: 1e12` -- is refused before anything runs; the field's error message states its bound,
and the generated configuration reference shows it.

Import paths are the strings by which YAML names a workflow, a judge, a baseline policy, a loss or an advantage
function. `import_object` resolves 'package.module:attr', 'package.module.attr' or 'path/to/file.py:attr' to the
object (a file imports its sibling modules as `python file.py` would), raising a `ConfigError` that says which part
failed; `is_import_path` tells such a path from a registry's name; `importable_path` is its inverse, the path a
`Job` writes to YAML for an object given in Python (None when importing could not give it back: a lambda, a nested
function, an interactive session's function).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError


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


def import_object(import_path: str) -> Any:
    """Resolve 'package.module:attr', 'package.module.attr' or 'path/to/file.py:attr' to the object.

    `attr` may be dotted (a class attribute); AgentJet's 'package.module->attr' works too. The current
    directory is tried as a last resort for modules, as `python -m` would find them.
    """
    module_part, separator, attr_part = import_path.replace("->", ":").rpartition(":")
    if not separator:
        module_part, _, attr_part = import_path.rpartition(".")
    if not module_part or not attr_part:
        raise ConfigError(f"cannot import {import_path!r}: write it as 'package.module:name' or 'path/to/file.py:name'")
    module = _import_file(module_part) if module_part.endswith(".py") else _import_module(module_part, import_path)
    target: Any = module
    for depth, name in enumerate(attr_part.split(".")):
        try:
            target = getattr(target, name)
        except AttributeError:
            owner = ".".join([module_part, *attr_part.split(".")[:depth]])
            raise ConfigError(f"cannot import {import_path!r}: {owner} has no attribute {name!r}") from None
    return target


def importable_path(obj: Any) -> str | None:
    """'module:qualname' (or 'script.py:qualname' for a script's own objects) when importing it gives back `obj`."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or not qualname or "<" in qualname:  # <lambda>, <locals>
        return None
    module = sys.modules.get(module_name)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if target is not obj:
        return None
    if module_name != "__main__":
        return f"{module_name}:{qualname}"
    script = getattr(module, "__file__", None)  # None in an interactive session
    return f"{Path(script).resolve()}:{qualname}" if script else None


def _import_module(module_name: str, import_path: str) -> types.ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing_is_target = err.name is not None and (module_name == err.name or module_name.startswith(err.name + "."))
        if not missing_is_target:
            raise ConfigError(
                f"cannot import {import_path!r}: importing {module_name} failed: {_one_line(err)}"
            ) from err
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
            return _import_module(module_name, import_path)
        raise ConfigError(
            f"cannot import {import_path!r}: no module named {err.name!r} (searched sys.path and the current directory)"
        ) from None
    except Exception as err:
        raise ConfigError(
            f"cannot import {import_path!r}: importing {module_name} failed: {type(err).__name__}: {_one_line(err)}"
        ) from err


def _import_file(file_name: str) -> types.ModuleType:
    path = Path(file_name).resolve()
    if not path.is_file():
        raise ConfigError(f"cannot import from {file_name!r}: no such file")
    module_name = f"_sparring_user_{re.sub(r'[^0-9A-Za-z_]', '_', str(path))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.parent))  # its sibling modules import as they would for `python file.py`
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise ConfigError(
            f"cannot import from {file_name!r}: running the file failed: {type(err).__name__}: {_one_line(err)}"
        ) from err
    finally:
        sys.path.remove(str(path.parent))
    return module


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def is_import_path(text: str) -> bool:
    """Whether a name is written as an import path: it has a ':' or a '.', which no registered built-in name has."""
    return ":" in text or "." in text


def import_field(field: str, import_path: str, error_type: type[Exception] = ValueError) -> Any:
    """The object at `import_path`, which the config's `field` names; an `error_type` naming `field` when it cannot
    be imported."""
    try:
        return import_object(import_path)
    except ConfigError as error:
        raise error_type(f"{field}: {error}") from None


def import_policy(field: str, import_path: str) -> Any:
    """The scripted policy at `import_path` (a baseline or a league opponent); a ValueError naming `field` if it is
    none."""
    policy = import_field(field, import_path)
    if not callable(policy):
        raise ValueError(
            f"{field}: {import_path!r} is a {type(policy).__name__}, not a policy function "
            "`policy(messages, rng) -> str`"
        )
    return policy
