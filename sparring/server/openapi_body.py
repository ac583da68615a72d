"""`declared_body` and `declared_errors`: what a route takes and what it may answer, declared in `/openapi.json`.

The routes of both protocols read their JSON bodies themselves (to answer a
bad one with their own error shape, to take protobuf too, to give up a
rejected request's `seq_id`), so FastAPI cannot see what they expect and
`/openapi.json` would say they take no body. Each route declares its
request model through `openapi_extra=declared_body(Model)`, with every
nested model inlined, so a schema-driven fuzzer (schemathesis) generates
valid bodies as well as invalid ones. Each router declares the error
statuses its routes answer with (`declared_errors`), so a schema-driven
client finds every status it can get documented.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def declared_body(model: type[BaseModel]) -> dict:
    """`openapi_extra` declaring a required JSON body of `model`."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}


ERROR_STATUSES = {
    400: "the request is malformed or asks for more than this server's bounds (the message names the field)",
    401: "the API key is missing or wrong",
    404: "an id, path or model this server does not know (or that belongs to another session)",
    413: "the body is larger (or inflates larger) than this route's limit",
    415: "a compressed body this server cannot inflate",
    500: "the server failed (a one-line message, never a traceback)",
}
"""Every error status a route of this server answers with, and why."""


def declared_errors(*statuses: int) -> dict:
    """`responses` declaring these error statuses, each a JSON body with a message."""
    message = {
        "type": "object",
        "description": "`detail` (Tinker routes) or `error.message` (OpenAI routes) says what went wrong",
    }
    return {
        status: {"description": ERROR_STATUSES[status], "content": {"application/json": {"schema": message}}}
        for status in statuses
    }
