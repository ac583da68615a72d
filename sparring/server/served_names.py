"""`ServedBase`: the one base model `sparring serve` loads and the names clients may call it by.

`serve --model` takes `SOURCE` (a catalogue name, Hugging Face directory or .gguf file, served under that
name) or `NAME=SOURCE` (served under `NAME`), repeatable: code written for another service asks for the
models it was written for (the Tinker cookbook's twenty questions asks for `Qwen/Qwen3.5-9B` as its answerer),
and the operator decides which local model answers each name. Every SOURCE must be the same model (one engine:
loaded once, its LoRA adapters shared by every name); a bad entry is a one-line `ValueError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..models import resolve_model

MAX_NAME_CHARS = 128


@dataclass(frozen=True)
class ServedBase:
    """The base model of a server and its served names."""

    source: str
    """What is loaded: catalogue name, Hugging Face directory or .gguf file."""
    names: list[str]
    """The names clients may give it, in the order given (a plain SOURCE entry is served under itself)."""


def parse_served_base(entries: list[str]) -> ServedBase:
    """The `ServedBase` of `--model` entries (`SOURCE` or `NAME=SOURCE`); ValueError naming the bad entry."""
    if not entries:
        raise ValueError("--model: give at least one model (SOURCE or NAME=SOURCE)")
    pairs = []
    for entry in entries:
        name, sep, source = entry.partition("=")
        if not sep or os.path.exists(entry):
            name, source = entry, entry
        if not name.strip() or not source.strip():
            raise ValueError(f"--model takes SOURCE or NAME=SOURCE, got {entry!r}")
        if len(name) > MAX_NAME_CHARS or any(char.isspace() or not char.isprintable() for char in name):
            raise ValueError(
                f"--model {entry!r}: a served name has at most {MAX_NAME_CHARS} printable characters and no spaces"
            )
        pairs.append((name, source))
    names = [name for name, _ in pairs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"--model: the served name {repeated[0]!r} is given more than once")
    source = pairs[0][1]
    loaded = resolve_model(source).path
    for name, other in pairs[1:]:
        if other != source and resolve_model(other).path != loaded:
            raise ValueError(
                f"--model {name}={other}: this server loads one base model ({source}); serve {other} from a second "
                "`sparring serve` on another port, or name this model's sources only"
            )
    return ServedBase(source=source, names=names)
