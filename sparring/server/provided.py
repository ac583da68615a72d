"""`Provide` and `provided`: one object handed to every handler of a router, so handlers are named functions.

The routes of both protocols are module-level functions that take what they
answer from (the `TinkerService`, the OpenAI routes' `ChatService`) as an
argument, so a test calls one directly or mounts it alone. A router factory
(`tinker_router(service)`, `openai_router(...)`) lists
`Depends(Provide(key, value))` among the router's dependencies, which FastAPI
solves before a handler's own; the handler's `Depends(getter)` then reads the
value back with `provided(request, key)`.
"""

# No `from __future__ import annotations`: FastAPI reads `Provide.__call__`'s annotation as an object (an
# instance has no module globals to resolve a string in).

from typing import Any

from fastapi import Request


class Provide:
    """A router dependency that puts `value` on each request as `request.state.<key>`."""

    def __init__(self, key: str, value: Any):
        self.key = key
        self.value = value

    def __call__(self, request: Request) -> None:
        setattr(request.state, self.key, self.value)


def provided(request: Request, key: str) -> Any:
    """What the router's `Provide(key, ...)` put on this request; a RuntimeError naming the fix if nothing did."""
    try:
        return getattr(request.state, key)
    except AttributeError:
        raise RuntimeError(
            f"{request.url.path}: no {key!r} on this request; mount the route with "
            f"dependencies=[Depends(Provide({key!r}, ...))]"
        ) from None
