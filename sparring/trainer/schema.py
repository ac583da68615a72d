"""The ground every job config stands on: strict pydantic records whose errors name the dotted field path.

`ConfigRecord` is the base of every config record (`sparring.trainer.config`):
an unknown key is an error, a float must be finite, and a failed validation
raises `ConfigError` whose message is one line that starts with the field's
dotted path (and the file, when loading one), e.g. ``job.yaml:
algorithm.group_size: Input should be less than or equal to 1024 (got
1000000000000)``; several problems share that line, separated by ``; ``.
`child_annotation` walks the schema one dotted key at a time, so an unknown
field -- in a validation error or a ``--set`` override -- is reported with
the closest valid key ("did you mean"), or the keys that would have worked
when none is close.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
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
