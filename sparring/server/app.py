"""`create_app`: the one FastAPI app behind `sparring serve`, composed of the two protocol packages.

It loads the base model once (one engine), mounts the Tinker wire protocol
(`server.tinker`) under `/api/v1` and the OpenAI-compatible API
(`server.openai`) under `/v1`, both on that engine. Two cross-cutting
rules live here: an API key, when one is configured, is required on every
route but the health checks (`X-API-Key` as the Tinker SDK sends it, or
`Authorization: Bearer` as OpenAI clients do); and every error leaves as
JSON with a status code — 4xx naming the bad input, 500 with a one-line
message and never a traceback.
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..engine import EngineConfig
from ..models import sparring_home
from ..clients import ServiceClient
from .openai import ServedModels, openai_router
from .tinker import FutureStore, TinkerService, WireError, describe, tinker_router

logger = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/api/v1/healthz", "/healthz"})


def create_app(
    model: str = "smollm2-135m-instruct",
    *,
    api_key: str | None = None,
    device: str = "cpu",
    base_dir: str | Path | None = None,
    engine_config: EngineConfig | None = None,
) -> FastAPI:
    """The app serving `model` (catalogue name, HF directory or .gguf); loads the model now.

    Checkpoints saved through the Tinker API go under `base_dir` (default
    `$SPARRING_HOME/server`). With `api_key`, requests must carry it.
    """
    base_dir = Path(base_dir) if base_dir is not None else sparring_home() / "server"
    service_client = ServiceClient(base_dir=base_dir, engine_config=engine_config or EngineConfig(device=device))
    tinker = TinkerService(model, service_client, FutureStore())

    app = FastAPI(title="sparring", summary=f"Tinker and OpenAI-compatible APIs on {model}")
    app.state.tinker = tinker
    _install_error_handlers(app)
    if api_key:
        _require_api_key(app, api_key)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "model": model}

    app.include_router(tinker_router(tinker), prefix="/api/v1")

    # OpenAI-compatible API (/v1/chat/completions, /v1/models): the base model, the Tinker API's
    # sampling sessions by id, and saved adapter directories, on the same engine (the API key is checked above).
    app.include_router(openai_router(ServedModels(service=service_client, base_models=[model], samplers=tinker.sampling_client)))

    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(WireError)
    async def wire_error(request: Request, error: WireError):
        return JSONResponse({"detail": error.message}, status_code=error.status)

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
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not given or not secrets.compare_digest(given.encode(), api_key.encode()):
            return JSONResponse({"detail": "missing or wrong API key: send it as X-API-Key or Authorization: Bearer"}, status_code=401)
        return await call_next(request)
