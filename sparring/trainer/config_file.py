"""The job YAML file: reading it (with ``--set section.field=value`` overrides) and writing it.

`load_config_file` reads and validates a job file, every error prefixed with
the file name, or with the `--set` override it comes from; import paths that
name a file or module beside the config file resolve against its folder; `apply_overrides` implements ``--set``
against the
`TuneConfig` schema, so a typo is reported with the keys that would have
worked; `dump_config` writes a config back, every field included, so a run
directory holds the exact file that reproduces it.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from .config import TuneConfig
from .run_config import MOVED_KEYS, note_moved_keys
from .schema import ConfigError, child_annotation, short_repr


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a mapping that names a key twice is an error (PyYAML silently keeps the last)."""


def _mapping_without_repeats(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, Hashable) and key in first_line:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first given on line {first_line[key]})", key_node.start_mark
            )
        if isinstance(key, Hashable):
            first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_repeats)

_NUMBER_PATTERN = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _parse_override_value(text: str) -> Any:
    value = yaml.safe_load(text) if text.strip() else None
    # YAML 1.1 reads "3e-5" (no dot) as a string; a command line means the number.
    if isinstance(value, str) and _NUMBER_PATTERN.match(value):
        return float(value)
    return value


def apply_overrides(
    config_dict: dict[str, Any], overrides: Sequence[str], root: type[BaseModel] = TuneConfig
) -> dict[str, Any]:
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
        if root is TuneConfig and len(keys) == 2 and keys[0] == "algorithm" and keys[1] in MOVED_KEYS:
            note_moved_keys([keys[1]])  # set where the key lives now, so it overrides a file that uses the new key
            keys = list(MOVED_KEYS[keys[1]])
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


def load_config_file(
    path: str | os.PathLike[str], overrides: Sequence[str] = (), dataset_root: str | os.PathLike[str] | None = None
) -> TuneConfig:
    """Read a job YAML file, apply ``--set`` style overrides and validate it; errors name the file.

    `dataset_root` is the folder the file's own relative dataset paths are read from (a packaged game's
    folder, so its config works from any directory); without it a relative dataset path names the file
    or folder beside the config when there is one (as its import paths do), else stays relative to the
    working directory. Paths given in `overrides` are never rebased.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"cannot read config file {path}: not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        raise ConfigError(_describe_yaml_error(path, err)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config sections, not {type(data).__name__}")
    if dataset_root is not None:
        _rebase_dataset_paths(data, Path(dataset_root))
    else:
        _rebase_dataset_paths(data, path.parent, only_existing=True)
    _rebase_import_paths(data, path.parent)
    for override in overrides:
        try:
            data = apply_overrides(data, [override])
        except ConfigError as err:
            raise ConfigError(f"--set {override}: {err}") from None
    try:
        return TuneConfig.from_dict(data)  # imports nothing: the names it gives are checked when the run is built
    except ConfigError as err:
        raise ConfigError(f"{_blamed(err.problems, overrides) or path}: {err}", err.problems) from None


def _blamed(problems: Sequence[str], overrides: Sequence[str]) -> str | None:
    """`--set PATH=VALUE` when every problem is at a field an override set (or inside it, or its section); else None."""
    keys = [override.partition("=")[0].strip() for override in overrides]
    blamed = []
    for problem in problems:
        location = problem.partition(":")[0]
        culprit = next(
            (
                key
                for key in keys
                if location == key or location.startswith(key + ".") or key.startswith(location + ".")
            ),
            None,
        )
        if culprit is None:
            return None
        blamed.append(next(override for override in overrides if override.partition("=")[0].strip() == culprit))
    return ", ".join(f"--set {override}" for override in dict.fromkeys(blamed)) or None


def _describe_yaml_error(path: Path, err: yaml.YAMLError) -> str:
    """`file:line:column: invalid YAML: problem`, on one line."""
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    return f"{where}: invalid YAML: {problem}"


def _rebase_dataset_paths(data: dict[str, Any], root: Path, only_existing: bool = False) -> None:
    """Make the relative `path` of each dataset section in a config dict relative to `root` (absolute ones stay);
    with `only_existing`, only the paths that exist under `root`, made absolute (the others stay as they are)."""
    validation, warm_start = data.get("validation"), data.get("warm_start")
    nested = [section.get("dataset") for section in (validation, warm_start) if isinstance(section, dict)]
    for dataset in [data.get("train_dataset"), data.get("eval_dataset"), *nested]:
        if isinstance(dataset, dict) and isinstance(dataset.get("path"), str):
            given = Path(dataset["path"])
            if not only_existing:
                dataset["path"] = str(root / given)
            elif not given.is_absolute() and (root / given).exists():
                dataset["path"] = str((root / given).resolve())


def _rebase_import_paths(data: dict[str, Any], folder: Path) -> None:
    """Point the workflow, judge and baseline import paths that name a file or module in the config file's `folder` at
    that file, so they resolve against the config's folder first, never against a same-named folder in the working
    directory (`rhyme:rhyme` next to `config.yaml` is `<folder>/rhyme.py:rhyme` wherever the command runs)."""

    def rebased(import_path: Any) -> Any:
        if not isinstance(import_path, str):
            return import_path
        module, separator, attr = import_path.replace("->", ":").rpartition(":")
        if not separator or not module:
            return import_path
        candidate = folder / module if module.endswith(".py") else folder / f"{module}.py"
        if Path(module).is_absolute() or not candidate.is_file():
            return import_path
        return f"{candidate.resolve()}:{attr}"

    for field in ("workflow", "judge"):
        if field in data:
            data[field] = rebased(data[field])
    if isinstance(data.get("baselines"), dict):
        data["baselines"] = {name: rebased(import_path) for name, import_path in data["baselines"].items()}


def dump_config(config: TuneConfig, path: str | os.PathLike[str]) -> Path:
    """Write `config` as YAML (every field, defaults included, for manual editing); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    return path
