"""`create_app`: the one FastAPI app behind `sparring serve`, composed of the two protocol packages.

It loads the base model once (one engine), mounts the Tinker wire protocol
(`server.tinker`) under `/api/v1` and the OpenAI-compatible API
(`server.openai`) under `/v1`, both on that engine, each answering every
served name of the model (`served_names`); with `tokenizer_cache`, it writes
a Hugging Face hub-cache entry per served name (`hub_cache`), so clients
that look tokenizers up by model name find them offline. The cross-cutting rules
live here: an API key, when one is configured, is required on every route
but the health checks (`X-API-Key` as the Tinker SDK sends it, or
`Authorization: Bearer` as OpenAI clients do; compared in constant time);
every request is bounded (`ServerLimits`: a body over its route's
`body_limit` is a 413 before it is read, and each protocol checks its
requests' work against the rest); every error leaves as JSON with a status code — 4xx naming the
bad input, 500 with a one-line message and never a traceback; and the app's
lifespan sweeps abandoned Tinker sessions and, when the server stops,
drains in-flight work until the `DrainClock` runs out.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from ..clients import ServiceClient
from ..engine import EngineConfig
from ..models import sparring_home
from .hub_cache import write_tokenizer_entries
from .limits import ServerLimits
from .openai import ServedModels, openai_router
from .shutdown import DrainClock
from .tinker import FutureStore, TinkerService, WireError, describe, tinker_router

logger = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/api/v1/healthz", "/healthz"})
SWEEP_EVERY_S = 5.0
"""How often abandoned Tinker sessions are looked for."""


def create_app(
    model: str = "smollm2-135m-instruct",
    *,
    api_key: str | None = None,
    device: str = "cpu",
    base_dir: str | Path | None = None,
    engine_config: EngineConfig | None = None,
    limits: ServerLimits | None = None,
    adapters: Mapping[str, str | Path] | None = None,
    served_names: Sequence[str] = (),
    tokenizer_cache: str | Path | None = None,
) -> FastAPI:
    """The app serving `model` (catalogue name, HF directory or .gguf); loads the model now.

    Checkpoints saved through the Tinker API go under `base_dir` (default
    `$SPARRING_HOME/server`). With `api_key`, requests must carry it. `adapters` (name -> PEFT directory)
    are served by name on the OpenAI API besides the base model and adapters saved through the server.
    `served_names` are the names both APIs answer for the base model (default: `model` itself); the first is the
    one a request without a name gets. With `tokenizer_cache`, each served name's tokenizer is written there as
    a Hugging Face hub-cache entry (`app.state.tokenizer_entries` says what was written).
    """
    limits = limits or ServerLimits()
    base_dir = Path(base_dir) if base_dir is not None else sparring_home() / "server"
    service_client = ServiceClient(base_dir=base_dir, engine_config=engine_config or EngineConfig(device=device))
    tinker = TinkerService(model, service_client, FutureStore(), served_names=served_names, limits=limits)
    base_models = {name: model for name in tinker.served_names}
    served = ServedModels(
        service=service_client,
        base_models=base_models,
        samplers=tinker.sampling_client,
        adapters=adapters,
        saved_adapter=tinker.saved_adapter,
    )
    clock = DrainClock(limits.drain_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        sweeper = asyncio.ensure_future(_sweep_forever(tinker))
        try:
            yield
        finally:
            sweeper.cancel()
            cancelled = await tinker.store.drain(clock.remaining())
            if cancelled:
                logger.warning("stopped: %d requests still running after the drain were cancelled", cancelled)

    app = FastAPI(title="sparring", summary=f"Tinker and OpenAI-compatible APIs on {model}", lifespan=lifespan)
    app.state.tinker = tinker
    app.state.drain_clock = clock
    app.state.tokenizer_entries = []
    if tokenizer_cache is not None:
        aliases = [name for name in tinker.served_names if name != model]
        model_dir = Path(tinker.engine.model_dir)
        app.state.tokenizer_entries = write_tokenizer_entries(
            Path(tokenizer_cache), model_dir, tinker.served_names, aliases
        )
    _install_error_handlers(app)
    if api_key:
        _require_api_key(app, api_key)
    app.add_middleware(_BodyLimit, limits=limits)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "model": model, "served_names": tinker.served_names}

    app.include_router(tinker_router(tinker), prefix="/api/v1")

    # OpenAI-compatible API (/v1/chat/completions, /v1/models): the base model, the Tinker API's sampling sessions
    # by id, the operator's adapters by name and adapters saved through the server by tinker:// path, on the same
    # engine (the API key is checked above).
    app.include_router(openai_router(served, limits=limits, context_length=tinker.engine.max_context))

    return app


async def _sweep_forever(tinker: TinkerService) -> None:
    while True:
        await asyncio.sleep(SWEEP_EVERY_S)
        tinker.sweep()


class _BodyLimit:
    """ASGI middleware: a request body over its route's `ServerLimits.body_limit` is refused with 413, declared or
    streamed."""

    def __init__(self, app, limits: ServerLimits):
        self.app = app
        self.limits = limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        max_bytes = self.limits.body_limit(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > max_bytes:
            return await JSONResponse({"detail": _too_large(max_bytes)}, status_code=413)(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    raise WireError(413, _too_large(max_bytes))
            return message

        await self.app(scope, counted, send)


def _too_large(max_bytes: int) -> str:
    return f"request body larger than this route's limit of {max_bytes} bytes (it follows serve --max-request-tokens)"


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(WireError)
    async def wire_error(request: Request, error: WireError):
        return JSONResponse({"detail": error.message}, status_code=error.status)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, error: ClientDisconnect):
        # the client left (or was closed for sending its body too slowly, `read_timeouts.py`): nobody reads this
        path = request.url.path
        logger.info("%s %s: the client disconnected before its request body was complete", request.method, path)
        return JSONResponse({"detail": "the client disconnected before its request body was complete"}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError):
        return JSONResponse({"detail": f"invalid request: {describe(error)}"}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):
        logger.error("%s %s failed", request.method, request.url.path, exc_info=error)
        return JSONResponse({"detail": f"internal error: {type(error).__name__}: {error}"}, status_code=500)


def _require_api_key(app: FastAPI, api_key: str) -> None:
    @app.middleware("http")
    async def check_api_key(request: Request, call_next):
        if request.url.path in OPEN_PATHS:
            return await call_next(request)
        given = (
            request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        )
        if not given or not hmac.compare_digest(given.encode(), api_key.encode()):
            return JSONResponse(
                {"detail": "missing or wrong API key: send it as X-API-Key or Authorization: Bearer"}, status_code=401
            )
        return await call_next(request)
