"""The floors of the package, as pyproject.toml's `[tool.sparring.layers]` states them, hold for every import.

Every `import` / `from ... import` in sparring's source (at module level or inside a function, since a lazy import
is an arrow too) is resolved to the package it names; an arrow from a package to one listed after it, or to the
package root from outside `public_api_users`, breaks the layering and fails here with the file and line. A
package missing from the list fails too, so a new one is placed deliberately.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sparring"


def contract() -> tuple[list[str], set[str]]:
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["sparring"]["layers"]
    return layers["order"], set(layers["public_api_users"])


def layer_of(module: str) -> str | None:
    """The package of `sparring.X...` (`X`), or None for the package root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every sparring module `path` imports."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            if node.module:
                found.append((node.lineno, ".".join([*base, node.module])))
            else:  # `from ... import types`: each name is a module of that package
                found += [(node.lineno, ".".join([*base, alias.name])) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name == "sparring" or name.startswith("sparring.")]


def layering_breaks(order: list[str], public_api_users: set[str]) -> list[str]:
    breaks = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        here = layer_of(module)
        if here is None:
            continue  # the root re-exports the public API from every layer
        if here not in order:
            breaks.append(f"{path.relative_to(ROOT)}: package {here!r} is not placed in [tool.sparring.layers] order")
            continue
        for line, name in imported_modules(path, module):
            there = layer_of(name)
            if there == here:
                continue
            if there is None:
                if here not in public_api_users:
                    breaks.append(
                        f"{path.relative_to(ROOT)}:{line}: {here} imports the package root (only "
                        f"{sorted(public_api_users)} may)"
                    )
            elif there not in order or order.index(there) > order.index(here):
                breaks.append(f"{path.relative_to(ROOT)}:{line}: {here} imports {name}, a floor above it")
    return breaks


def test_every_import_points_down_the_floors():
    assert layering_breaks(*contract()) == []


def test_an_import_up_the_floors_is_caught():
    """The check itself: the real order reversed makes almost every arrow point up."""
    order, users = contract()
    breaks = layering_breaks(list(reversed(order)), users)
    assert any(
        "rollout imports sparring.clients" in line or "rollout imports sparring.types" in line for line in breaks
    ), breaks[:5]
