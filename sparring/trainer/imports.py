"""Import paths: the strings by which YAML names a workflow, a judge, a baseline policy, a loss or an advantage
function, both ways.

`import_object` resolves 'package.module:attr', 'package.module.attr' or
'path/to/file.py:attr' to the object (a file imports its sibling modules as
`python file.py` would), raising `ConfigError` that says which
part failed; `is_import_path` tells such a path from a registry's name;
`importable_path` is its inverse, the path a `Job` writes to YAML for an
object given in Python (None when importing could not give it back: a
lambda, a nested function, an interactive session's function).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

from .schema import ConfigError


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
