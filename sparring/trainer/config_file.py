"""What a job file says and what its names mean: the YAML read, ``--set``, import paths, the names checked.

The YAML file. `load_config_file` reads and validates a job file, every error prefixed with the file name, or with
the `--set` override it comes from; import paths that name a file or module beside the config file resolve against
its folder. `apply_overrides` implements ``--set section.field=value`` against the `TuneConfig` schema, so a typo is
reported with the keys that would have worked. Writing a config back is `config.dump_config`.

Import paths are the strings by which YAML names a workflow, a judge, a baseline policy, a loss or an advantage
function. `import_object` resolves 'package.module:attr', 'package.module.attr' or 'path/to/file.py:attr' to the
object (a file imports its sibling modules as `python file.py` would), raising a `ConfigError` that says which part
failed; `importable_path` is its inverse, the path a `Job` writes to YAML for an object given in Python (None when
importing could not give it back: a lambda, a nested function, an interactive session's function); `import_field`
and `import_policy` name the config field in the error.

The names in a config that only what they name can check, run when the run is built, never when a config is read.
A `TuneConfig` validates its structure on construction and imports nothing to do it. `import_workflow`, which
`resolve_run` calls first, imports the workflow and judge and checks their signatures (`WorkflowError`);
`check_names`, next, before any data or model loads, checks what each other name means: each model's torch device;
`algorithm.algorithm_type` and `algorithm.loss_fn` against their registries (`ADVANTAGE_ESTIMATORS`,
`engine.losses.LOSSES`), one given as an import path ('package.module:function') imported, its signature checked
and registered under that path, so the rest of the run looks it up like a built-in name; the baselines', the
league's scripted opponents' and the step hooks' import paths (`import_step_hook`); and, once every import is done,
the loss against its registry and the `loss_fn_config` keys (and an entropy target's coefficient) against it. Every
problem is one line that starts with the field's dotted path; several found at once share the line, in the config's
order (`ConfigError`, as a config's own validation raises it). A check is an import, and an error names the field.
The config's `workflow_args` are then checked against the workflow's record (`config.check_config_args`).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import os
import re
import sys
import types
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel

from .config import TuneConfig
from .schema import (
    ConfigError,
    WorkflowArgs,
    child_annotation,
    declared_args,
    is_import_path,
    short_repr,
)
from .sections import MOVED_KEYS, note_moved_keys

if TYPE_CHECKING:
    from ..rollout.workflow import EpisodeFn


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


def check_names(config: TuneConfig) -> None:
    """Check (and register) every name `config` gives that needs an import to check; ConfigError listing each
    problem with its field path, in the config's order.

    What needs importing is imported first; the loss is registered and checked against its registry after that,
    with its settings (its problems are still listed before the baselines')."""
    problems: list[str] = []

    def check(field: str | None, run: Callable[[], object], into: list[str] = problems) -> None:
        try:
            run()
        except ValueError as error:  # ConfigError included
            into.append(f"{field}: {error}" if field else str(error))

    models = {"model": config.model} if config.models is None else {f"models.{k}": v for k, v in config.models.items()}
    models.update({f"auxiliary_models.{name}": model for name, model in config.auxiliary_models.items()})
    for path, model in models.items():
        check(f"{path}.device", lambda device=model.device: _torch_device(device))
    algorithm = config.algorithm
    check("algorithm.algorithm_type", lambda: _estimator(algorithm.algorithm_type))
    loss_at, imported = len(problems), []  # the loss's problems go here: after the estimator's, before the baselines'
    check("algorithm.loss_fn", lambda: imported.append(_import_loss(algorithm.loss_fn)))
    for name, path in config.baselines.items():
        check(None, lambda name=name, path=path: import_policy(f"baselines.{name}", path))
    if config.league is not None:
        for name, path in config.league.scripted.items():
            check(None, lambda name=name, path=path: import_policy(f"league.scripted.{name}", path))
    for index, path in enumerate(config.step_hooks):
        check(None, lambda index=index, path=path: import_step_hook(f"step_hooks[{index}]", path))
    loss_problems: list[str] = []
    if imported:  # a registry's name, or an import path that imported
        check("algorithm.loss_fn", lambda: _loss(algorithm.loss_fn, imported[0]), loss_problems)
    if imported and not loss_problems:  # the loss is known: its settings can be checked against it
        from ..engine.losses import check_loss_config

        fn_config = algorithm.loss_fn_config
        check("algorithm.loss_fn_config", lambda: check_loss_config(algorithm.loss_fn, fn_config), loss_problems)
        if algorithm.entropy_target is not None:
            coefficient = {"entropy_coef": algorithm.entropy_target.initial_coef}
            check("algorithm.entropy_target", lambda: check_loss_config(algorithm.loss_fn, coefficient), loss_problems)
    problems[loss_at:loss_at] = loss_problems
    if problems:
        raise ConfigError("; ".join(problems), problems)


def _torch_device(value: str) -> None:
    import torch

    try:
        torch.device(value)
    except (RuntimeError, TypeError):
        raise ValueError(f"{value!r} is not a torch device; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from None


def _estimator(value: str) -> None:
    from ..algorithms import ADVANTAGE_ESTIMATORS, register_estimator

    if value in ADVANTAGE_ESTIMATORS:
        return
    if not is_import_path(value):
        raise ValueError(
            f"unknown advantage estimator {value!r}; choose one of {sorted(ADVANTAGE_ESTIMATORS)} "
            "or give the import path 'package.module:function' of one"
        )
    register_estimator(value, import_object(value))


def _import_loss(value: str) -> Callable | None:
    """The loss at `value` when it is the import path of one not registered yet; None for a registry's name."""
    from ..engine.losses import LOSSES

    return import_object(value) if value not in LOSSES and is_import_path(value) else None


def _loss(value: str, loss: Callable | None) -> None:
    """`value` names a loss the RL loop trains with; `loss`, the one imported from it, is registered under it first."""
    from ..engine.losses import advantage_weighted_losses, register_loss

    if loss is not None:
        register_loss(value, loss)
    choices = advantage_weighted_losses()
    if value not in choices:
        carry = "its datums carry target_tokens, logprobs and advantages, and train where the advantage is not 0"
        raise ValueError(
            f"loss_fn {value!r} is not a loss the RL loop trains with ({carry}); choose one of "
            f"{choices} or give the import path 'package.module:function' of one"
        )


HOOK_METHODS = ("before_rollout", "after_training")


def import_step_hook(field: str, import_path: str) -> Any:
    """The hook class (or hook object) at `import_path`; a ValueError naming `field` when it is neither."""
    hook = import_field(field, import_path)
    if not any(callable(getattr(hook, method, None)) for method in HOOK_METHODS):
        raise ValueError(
            f"{field}: {import_path!r} has neither `before_rollout` nor `after_training`; a step hook is a "
            "StepHook subclass (sparring.StepHook)"
        )
    if isinstance(hook, type):
        try:
            inspect.signature(hook).bind()
        except TypeError:
            raise ValueError(
                f"{field}: the class {import_path!r} needs constructor arguments; a hook named in a config "
                "is built with none (pass a built one to tune(step_hooks=...))"
            ) from None
    return hook


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


class WorkflowError(ConfigError, TypeError):
    """The workflow or judge cannot be used: not importable, not callable, or its signature does not fit."""


def import_workflow(
    config: TuneConfig, workflow: Any, judge: Any
) -> tuple[EpisodeFn, Callable | None, type[WorkflowArgs] | None]:
    """The workflow as a checked episode function, the judge (the objects given, else imported from the config) and
    the workflow's `WorkflowArgs` record (None when it declares none; `config.check_config_args` checks the config's
    `workflow_args` against it)."""
    from ..rollout import WorkflowSignatureError, as_episode_fn  # here: reading a config must not import torch

    if workflow is None:
        if not config.workflow:
            raise WorkflowError(
                "workflow: not set; give its import path (workflow: package.module:function or "
                "path/to/file.py:Class) or pass it to tune()"
            )
        workflow = import_field("workflow", config.workflow, WorkflowError)
    if judge is None and config.judge:
        judge = import_field("judge", config.judge, WorkflowError)
    if judge is not None and not callable(judge):
        raise WorkflowError(
            f"judge: {config.judge or judge!r} is a {type(judge).__name__}, not a function that scores an episode"
        )
    try:
        episode_fn = as_episode_fn(workflow)  # a bad signature fails here, before any data or model loads
    except WorkflowSignatureError as error:
        raise WorkflowError(f"workflow: {error}") from None
    return episode_fn, judge, declared_args(workflow)
