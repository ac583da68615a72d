"""MkDocs hook: the configuration reference page (`configuration.md`), generated from the config records on every build.

The page is never committed, so it cannot drift from the code: `ConfigRecord.use_attribute_docstrings` makes
each field's docstring its pydantic `description`, and its type, default and bounds come from the same
`model_fields`. `config_sections` walks the records from `TuneConfig` down (a record's fields whose type holds
another record: `model`, `models.<name>`, `league`, ...) and renders one section per record class, one row per
field, keyed by the dotted YAML path that a job file and `--set` use.
"""

from __future__ import annotations

import html
import json
import re
import types
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

PAGE = "configuration.md"
BOUND_SYMBOLS = {Ge: ("≥", "ge"), Gt: (">", "gt"), Le: ("≤", "le"), Lt: ("<", "lt")}


@dataclass
class RecordSection:
    """One config record class and every YAML key prefix under which it appears."""

    record: type[BaseModel]
    prefixes: list[str] = field(default_factory=list)
    """Dotted paths of the places that hold this record ('' for the job file's top level)."""


def nested_records(annotation: Any, path: str) -> list[tuple[type[BaseModel], str]]:
    """The records inside a field's type, with the YAML path each one sits at (`models.<name>` for a dict's values)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, path)]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict:
        return nested_records(args[1], f"{path}.<name>")
    if origin is list:
        return nested_records(args[0], f"{path}[i]")
    return [found for arg in args for found in nested_records(arg, path)]


def config_sections(root: type[BaseModel]) -> list[RecordSection]:
    """Every record reachable from `root`, in the order first met (depth first), with all its prefixes."""
    sections: dict[type[BaseModel], RecordSection] = {}

    def visit(record: type[BaseModel], prefix: str) -> None:
        first_visit = record not in sections
        section = sections.setdefault(record, RecordSection(record))
        section.prefixes.append(prefix)
        if not first_visit:
            return
        for name, info in record.model_fields.items():
            for nested, path in nested_records(info.annotation, f"{prefix}.{name}" if prefix else name):
                visit(nested, path)

    visit(root, "")
    return list(sections.values())


def type_text(annotation: Any) -> str:
    """A field's type as a reader writes it: `int | None`, `dict[str, TunerModelConfig]`, `'local' | 'ray'`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    if origin is Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin is Annotated:  # a bounded type inside a union (an old key's `Steps | None`): the type, bounds apart
        return type_text(args[0])
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_text(arg) for arg in args)}]"
    return annotation.__name__


def default_text(info: FieldInfo) -> str:
    """The default as YAML reads it (JSON notation), or how it is made when it is a record of its own."""
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        factory = info.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return f"its defaults ([{factory.__name__}](#{factory.__name__.lower()}))"
        return f"`{json.dumps(factory())}`"
    return f"`{json.dumps(info.default)}`"


def bounds_text(info: FieldInfo) -> str:
    """`≥ 1, ≤ 1024` from the field's annotated-types constraints; empty when it has none."""
    bounds = []
    for constraint in info.metadata:
        for kind, (symbol, attribute) in BOUND_SYMBOLS.items():
            if isinstance(constraint, kind):
                value = getattr(constraint, attribute)
                bounds.append(f"{symbol} {int(value) if float(value).is_integer() else value}")
    return ", ".join(bounds)


def prose(text: str | None) -> str:
    """A docstring as one table cell: one line, with `<`, `>`, `*` and `|` outside code spans shown as typed (a table
    does not split cells at a `|` inside a code span)."""
    parts = re.sub(r"\s+", " ", text or "").strip().split("`")
    for index in range(0, len(parts), 2):
        parts[index] = html.escape(parts[index], quote=False).replace("*", r"\*").replace("|", r"\|")
    return "`".join(parts)


def record_markdown(section: RecordSection) -> str:
    record = section.record
    places = ", ".join(f"`{prefix}`" if prefix else "the top level of a job file" for prefix in section.prefixes)
    lines = [f"## {record.__name__}", "", prose(record.__doc__), "", f"Found at: {places}.", ""]
    lines += ['<div class="config-reference" markdown>', ""]
    # Two columns, the key over its type, bounds and default, so the text column keeps room at 1280 px.
    lines += ["| YAML key: type, bounds, default | what it is for |", "| --- | --- |"]
    prefix = section.prefixes[0]
    deprecated_last = sorted(record.model_fields.items(), key=lambda item: item[1].description.startswith("Deprecated"))
    for name, info in deprecated_last:
        key = f"{prefix}.{name}" if prefix else name
        kind = " ".join(filter(None, [f"`{type_text(info.annotation)}`", bounds_text(info)]))
        lines.append(f"| `{key}`<br>{kind}<br>default {default_text(info)} | {prose(info.description)} |")
    return "\n".join([*lines, "", "</div>"]) + "\n"


def reference_markdown() -> str:
    """The whole configuration reference page."""
    from sparring.trainer import TuneConfig

    sections = config_sections(TuneConfig)
    intro = [
        "# Configuration reference",
        "",
        "Every key a job YAML file (`sparring train job.yaml`, `tune(config=...)`) can hold, generated from the config "
        "records in `sparring/trainer/` on every docs build: the text of each row is the docstring under that field, "
        "so a change to the code changes this page. The same dotted keys work with `--set key=value` on "
        "the command line. "
        "A record that appears in several places (a model under `model`, `models.<name>` or `auxiliary_models.<name>`) "
        "is listed once, its keys under the first place.",
        "",
        "Records: "
        + ", ".join(f"[{section.record.__name__}](#{section.record.__name__.lower()})" for section in sections)
        + ".",
        "",
    ]
    return "\n".join(intro) + "\n" + "\n".join(record_markdown(section) for section in sections)


def on_files(files, config):
    """Add the generated page to the site's files (before the nav is built, so the nav's entry resolves)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=reference_markdown()))
    return files
