"""`declared_body`: the request body of a route that reads its body itself, declared in `/openapi.json`.

The routes of both protocols read their JSON bodies themselves (to answer a
bad one with their own error shape, to take protobuf too, to give up a
rejected request's `seq_id`), so FastAPI cannot see what they expect and
`/openapi.json` would say they take no body. Each route declares its
request model through `openapi_extra=declared_body(Model)`, with every
nested model inlined, so a schema-driven fuzzer (schemathesis) generates
valid bodies as well as invalid ones.
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
