"""The job YAML file: reading it (with ``--set section.field=value`` overrides) and writing it.

`load_config_file` reads and validates a job file, every error prefixed with
the file name; `apply_overrides` implements ``--set`` against the
`TuneConfig` schema, so a typo is reported with the keys that would have
worked; `dump_config` writes a config back, every field included, so a run
directory holds the exact file that reproduces it.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Sequence

import yaml
from pydantic import BaseModel

from .config import TuneConfig
from .schema import ConfigError, child_annotation, short_repr

_NUMBER_PATTERN = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _parse_override_value(text: str) -> Any:
    value = yaml.safe_load(text) if text.strip() else None
    # YAML 1.1 reads "3e-5" (no dot) as a string; a command line means the number.
    if isinstance(value, str) and _NUMBER_PATTERN.match(value):
        return float(value)
    return value


def apply_overrides(config_dict: dict[str, Any], overrides: Sequence[str], root: type[BaseModel] = TuneConfig) -> dict[str, Any]:
    """Apply ``dotted.path=value`` overrides to a copy of a config dict, checking each path against `root`.

    Values are parsed as YAML (numbers, booleans, lists, ``null``). Missing
    intermediate sections are created, so ``algorithm.learning_rate=3e-5``
    works on a file that has no ``algorithm`` section.
    """
    result = copy.deepcopy(config_dict)
    for override in overrides:
        dotted, separator, raw_value = override.partition("=")
        keys = [key.strip() for key in dotted.split(".")]
        if not separator or not all(keys):
            raise ConfigError(f"override {override!r} must look like section.field=value")
        annotation: Any = root
        node = result
        for depth, key in enumerate(keys):
            path = keys[: depth + 1]
            annotation = child_annotation(annotation, key, path)
            if depth == len(keys) - 1:
                node[key] = _parse_override_value(raw_value)
                break
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(path)}: holds {short_repr(child)}, not a section with fields")
            node = child
    return result


def load_config_file(path: str | os.PathLike[str], overrides: Sequence[str] = (), dataset_root: str | os.PathLike[str] | None = None) -> TuneConfig:
    """Read a job YAML file, apply ``--set`` style overrides and validate it; errors name the file.

    `dataset_root` is the folder the file's own relative dataset paths are read from (a packaged game's
    folder, so its config works from any directory); without it they stay relative to the working
    directory, as in a user's file. Paths given in `overrides` are never rebased.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(_describe_yaml_error(path, err)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config sections, not {type(data).__name__}")
    if dataset_root is not None:
        _rebase_dataset_paths(data, Path(dataset_root))
    try:
        data = apply_overrides(data, overrides)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return TuneConfig.from_dict(data, source=str(path))


def _describe_yaml_error(path: Path, err: yaml.YAMLError) -> str:
    """`file:line:column: invalid YAML: problem`, on one line."""
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    return f"{where}: invalid YAML: {problem}"


def _rebase_dataset_paths(data: dict[str, Any], root: Path) -> None:
    """Make the relative `path` of each dataset section in a config dict relative to `root` (absolute ones stay)."""
    for section in ("train_dataset", "eval_dataset"):
        dataset = data.get(section)
        if isinstance(dataset, dict) and isinstance(dataset.get("path"), str):
            dataset["path"] = str(root / dataset["path"])


def dump_config(config: TuneConfig, path: str | os.PathLike[str]) -> Path:
    """Write `config` as YAML (every field, defaults included, for manual editing); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    return path
