"""Constrained replies as a chat call spells them: `choices=`, `regex=`, `response_format=`.

`take_constraint` pulls those arguments out of a call's keyword arguments and
turns them into one `OutputConstraint` for the sampler. `response_format`
takes OpenAI's shapes: `{"type": "text"}` (no constraint), `{"type":
"json_object"}` (any JSON object), `{"type": "json_schema", "json_schema":
{"name": ..., "schema": {...}}}`, or a pydantic model class (its JSON schema).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..types import OutputConstraint

CONSTRAINT_KEYS = ("choices", "regex", "response_format")
"""The chat-call keyword arguments that constrain the reply."""


def take_constraint(arguments: dict[str, Any]) -> OutputConstraint | None:
    """The constraint the arguments ask for (None when none), removing its keys from `arguments`."""
    choices, regex, response_format = (arguments.pop(key, None) for key in CONSTRAINT_KEYS)
    json_schema = schema_of_response_format(response_format)
    if choices is None and regex is None and json_schema is None:
        return None
    return OutputConstraint(choices=None if choices is None else list(choices), regex=regex, json_schema=json_schema)


def schema_of_response_format(response_format: Any) -> dict | None:
    """The JSON schema an OpenAI `response_format` asks for; None for plain text."""
    if response_format is None:
        return None
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return response_format.model_json_schema()
    if not isinstance(response_format, dict) or "type" not in response_format:
        raise ValueError(
            "response_format must be {'type': 'text' | 'json_object' | 'json_schema', ...} or a "
            f"pydantic model class, got {response_format!r}"
        )
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise ValueError("response_format of type 'json_schema' needs json_schema.schema, a JSON schema object")
        return schema
    raise ValueError(f"response_format type {kind!r} is not one of 'text', 'json_object', 'json_schema'")
