"""The HTTP routes of the Tinker wire protocol (mounted under `/api/v1`).

Each route decodes its body (JSON, or protobuf for `forward_backward`),
validates it against the `wire` request type and calls the
`TinkerService`. Work-starting routes answer `{"request_id": ...}`;
`retrieve_future` long-polls for the result and answers it as JSON, or as
protobuf for the two result types the SDK asks that for
(`Accept: application/x-protobuf`), `{"type": "try_again", ...}` while the
work runs, and `{"error": ..., "category": "user" | "server"}` when it
failed. `cancel_future` cancels a request (queued or running); the SDK sends
it for a sampling request its caller abandoned (`sample_cancel_enabled`).
Each route declares its JSON body in `/openapi.json` (`declared_body`).
`client/config` tells the SDK which encodings and features to use. MinT's
own extension endpoints (`/mint/...`) answer 404 naming themselves as
unsupported.

Each route is a module-level function of its request and the `TinkerService`
it answers from (the `Service` dependency), declared once on `protocol_routes`;
`tinker_router(service)` mounts them all on one service, and a test calls a
handler directly or mounts it alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from ...types import ForwardBackwardOutput, SampleResponse
from ..limits import MAX_INFLATION_RATIO, inflation_limit
from ..openapi_body import declared_body, declared_errors
from ..provided import Provide, provided
from . import wire
from .lanes import LaneClosed
from .proto import (
    PROTOBUF_MEDIA_TYPE,
    ProtoError,
    decode_forward_backward_request,
    encode_forward_backward_output,
    encode_sample_response,
)
from .service import TinkerService
from .wire import WireError, parse

logger = logging.getLogger(__name__)

# Feature flags for the SDK (fields of its ClientConfigResponse; unknown ones are ignored by older SDKs).
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "credential_default_source": "api_key",
    "use_pyqwest_transport": False,
    "proto_write_fwdbwd": False,
    "proto_compress_fwdbwd": False,
    "fwd_via_fwdbwd": False,
    "parallel_fwdbwd_chunks": True,
    "sample_no_retries": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
}
# sample_cancel_enabled: the SDK sends cancel_future for a sampling request its caller abandoned.
DYNAMIC_CONFIG = {"refresh_interval_sec": 300, "sample_cancel_enabled": True}
INFLATE_PIECE_BYTES = 1 << 20
"""How much of a compressed body is inflated at a time (so the bound is checked every MiB)."""
# Errors a request's own input causes; anything else is the server's fault.
USER_ERRORS = (ValueError, TypeError, FileNotFoundError, WireError, LaneClosed)


def json_response(content: Any, status: int = 200) -> Response:
    """JSON that may hold NaN/inf (a diverged loss must reach the client, not become a 500)."""
    return Response(json.dumps(content, allow_nan=True), status_code=status, media_type="application/json")


async def json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError) as error:
        raise WireError(400, f"request body is not valid JSON: {error}") from None
    except RecursionError:
        raise WireError(400, "request body is not valid JSON: nested too deeply") from None


async def forward_backward_body(request: Request, max_bytes: int) -> Any:
    """The body as its JSON shape, from JSON or (optionally zstd-compressed, inflated to at most `max_bytes`)
    protobuf."""
    if PROTOBUF_MEDIA_TYPE not in request.headers.get("content-type", ""):
        return await json_body(request)
    raw = await request.body()
    compressed = request.headers.get("content-encoding", "").lower() == "zstd"
    # In a thread: inflating and decoding a batch takes a while, and every other client would wait meanwhile.
    return await asyncio.to_thread(_decoded_protobuf, raw, compressed, max_bytes)


def _decoded_protobuf(raw: bytes, compressed: bool, max_bytes: int) -> dict:
    if compressed:
        raw = _inflated(raw, inflation_limit(max_bytes, len(raw)), max_bytes)
    try:
        return decode_forward_backward_request(raw)
    except ProtoError as error:
        raise WireError(400, f"invalid protobuf ForwardBackwardRequest: {error}") from None


def _inflated(raw: bytes, max_bytes: int, route_limit: int) -> bytes:
    """The zstd body inflated, read a piece at a time so a body that inflates past `max_bytes` is refused (413) there.

    `max_bytes` is `inflation_limit`'s: the route's limit, or less for a small body (a bomb stops within a MiB)."""
    try:
        import zstandard
    except ImportError:
        raise WireError(
            415, "zstd-compressed bodies need the zstandard package on the server; send them uncompressed"
        ) from None
    pieces, size = [], 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as reader:
            while piece := reader.read(INFLATE_PIECE_BYTES):
                size += len(piece)
                if size > max_bytes:
                    raise WireError(413, _inflation_refusal(len(raw), max_bytes, route_limit))
                pieces.append(piece)
    except zstandard.ZstdError as error:
        raise WireError(400, f"request body is not valid zstd: {error}") from None
    return b"".join(pieces)


def _inflation_refusal(compressed: int, max_bytes: int, route_limit: int) -> str:
    if max_bytes < route_limit:
        return (
            f"request body inflates past {max_bytes} bytes, more than {MAX_INFLATION_RATIO} times its compressed "
            f"{compressed} bytes: refused as a compression bomb (send it less compressed, or uncompressed)"
        )
    return f"request body inflates past this route's limit of {max_bytes} bytes (it follows serve --max-request-tokens)"


def result_response(result: Any, protobuf: bool) -> Response:
    if isinstance(result, ForwardBackwardOutput):
        if protobuf:
            return Response(encode_forward_backward_output(result), media_type=PROTOBUF_MEDIA_TYPE)
        outputs = [{name: _tensor_json(tensor) for name, tensor in datum.items()} for datum in result.loss_fn_outputs]
        return json_response(
            {"loss_fn_output_type": result.loss_fn_output_type, "loss_fn_outputs": outputs, "metrics": result.metrics}
        )
    if isinstance(result, SampleResponse):
        if protobuf:
            return Response(encode_sample_response(result), media_type=PROTOBUF_MEDIA_TYPE)
        sequences = [
            {"stop_reason": s.stop_reason, "tokens": s.tokens, "logprobs": s.logprobs} for s in result.sequences
        ]
        return json_response({"type": "sample", "sequences": sequences, "prompt_logprobs": result.prompt_logprobs})
    return json_response(result)


def _tensor_json(tensor) -> dict:
    array = tensor.to_numpy()
    return {"data": array.reshape(-1).tolist(), "dtype": tensor.dtype, "shape": list(array.shape)}


def error_result(error: BaseException) -> dict:
    if isinstance(error, USER_ERRORS):
        message = error.message if isinstance(error, WireError) else str(error)
        return {"error": message or type(error).__name__, "category": "user"}
    logger.error("request failed", exc_info=error)
    return {"error": f"internal error: {type(error).__name__}: {error}", "category": "server"}


SERVICE_KEY = "tinker_service"


def tinker_service(request: Request) -> TinkerService:
    """The service this request's router was built on (`tinker_router(service)` provides it)."""
    return provided(request, SERVICE_KEY)


Service = Annotated[TinkerService, Depends(tinker_service)]

protocol_routes = APIRouter(responses=declared_errors(400, 401, 404, 413, 500))
"""Every route of the protocol, declared once; `tinker_router` mounts them with their service."""


def tinker_router(service: TinkerService) -> APIRouter:
    """The Tinker protocol's routes on `service`, to be included under /api/v1."""
    router = APIRouter(dependencies=[Depends(Provide(SERVICE_KEY, service))])
    router.include_router(protocol_routes)
    return router


async def sequenced(request: Request, service: TinkerService, model: type[wire.SequencedRequest], body: Any = None):
    """The per-model request in the body (or in `body`, already decoded); one that fails validation gives its seq_id
    up."""
    body = await json_body(request) if body is None else body
    try:
        return parse(model, body)
    except WireError:
        service.reject(body)
        raise


# Service ---------------------------------------------------------------------


@protocol_routes.get("/healthz")
async def healthz():
    return {"status": "ok"}


@protocol_routes.get("/get_server_capabilities")
async def capabilities(service: Service):
    limits = {"max_context_length": service.engine.max_context, "trainable": True, "sampleable": True}
    return {"supported_models": [{"model_name": name, **limits} for name in service.served_names]}


@protocol_routes.post("/client/config", openapi_extra=declared_body(wire.ClientConfigRequest))
async def client_config(request: Request):
    parse(wire.ClientConfigRequest, await json_body(request))
    return CLIENT_CONFIG


@protocol_routes.post("/client/dynamic_config")
async def client_dynamic_config(request: Request):
    return DYNAMIC_CONFIG


@protocol_routes.post("/telemetry")
async def telemetry(request: Request):
    return {"status": "accepted"}


@protocol_routes.post("/create_session", openapi_extra=declared_body(wire.CreateSessionRequest))
async def create_session(request: Request, service: Service):
    return service.create_session(parse(wire.CreateSessionRequest, await json_body(request)))


@protocol_routes.post("/session_heartbeat", openapi_extra=declared_body(wire.SessionRequest))
async def session_heartbeat(request: Request, service: Service):
    service.heartbeat(parse(wire.SessionRequest, await json_body(request)).session_id)
    return {"type": "session_heartbeat"}


@protocol_routes.post("/sessions/{session_id}/finish")
async def finish_session(session_id: str, service: Service):
    service.finish_session(session_id)
    return json_response(None)


# Training ----------------------------------------------------------------------


@protocol_routes.post("/create_model", openapi_extra=declared_body(wire.CreateModelRequest))
async def create_model(request: Request, service: Service):
    return service.create_model(parse(wire.CreateModelRequest, await json_body(request)))


@protocol_routes.post("/get_info", openapi_extra=declared_body(wire.ModelRequest))
async def get_info(request: Request, service: Service):
    return await service.get_info(parse(wire.ModelRequest, await json_body(request)).model_id)


@protocol_routes.post("/unload_model", openapi_extra=declared_body(wire.ModelRequest))
async def unload_model(request: Request, service: Service):
    return service.unload_model(parse(wire.ModelRequest, await json_body(request)).model_id)


@protocol_routes.post(
    "/forward_backward", openapi_extra=declared_body(wire.ForwardBackwardRequest), responses=declared_errors(415)
)
async def forward_backward(request: Request, service: Service):
    body = await forward_backward_body(request, service.limits.body_limit(request.url.path))
    parsed = await sequenced(request, service, wire.ForwardBackwardRequest, body)
    return service.forward_backward(parsed, forward_only=parsed.forward_only)


@protocol_routes.post("/forward", openapi_extra=declared_body(wire.ForwardRequest))
async def forward(request: Request, service: Service):
    parsed = await sequenced(request, service, wire.ForwardRequest)
    as_fwdbwd = wire.ForwardBackwardRequest(
        model_id=parsed.model_id, seq_id=parsed.seq_id, forward_backward_input=parsed.forward_input
    )
    return service.forward_backward(as_fwdbwd, forward_only=True)


@protocol_routes.post("/optim_step", openapi_extra=declared_body(wire.OptimStepRequest))
async def optim_step(request: Request, service: Service):
    return service.optim_step(await sequenced(request, service, wire.OptimStepRequest))


@protocol_routes.post("/save_weights", openapi_extra=declared_body(wire.SaveWeightsRequest))
async def save_weights(request: Request, service: Service):
    return service.save_state(await sequenced(request, service, wire.SaveWeightsRequest))


@protocol_routes.post("/save_weights_for_sampler", openapi_extra=declared_body(wire.SaveWeightsForSamplerRequest))
async def save_weights_for_sampler(request: Request, service: Service):
    return service.save_for_sampler(await sequenced(request, service, wire.SaveWeightsForSamplerRequest))


@protocol_routes.post("/load_weights", openapi_extra=declared_body(wire.LoadWeightsRequest))
async def load_weights(request: Request, service: Service):
    body = await json_body(request)
    try:
        parsed = parse(wire.LoadWeightsRequest, body)
        if parsed.session_id is not None:
            return service.create_model_from_checkpoint(parsed)
        if parsed.model_id is None:
            raise WireError(
                400, "invalid LoadWeightsRequest: give model_id (load into a model) or session_id (create one)"
            )
        return service.load_state(parsed)
    except WireError:
        service.reject(body)
        raise


@protocol_routes.post("/weights_info", openapi_extra=declared_body(wire.WeightsInfoRequest))
async def weights_info(request: Request, service: Service):
    return service.weights_info(parse(wire.WeightsInfoRequest, await json_body(request)).tinker_path)


# Sampling ---------------------------------------------------------------------


@protocol_routes.post("/create_sampling_session", openapi_extra=declared_body(wire.CreateSamplingSessionRequest))
async def create_sampling_session(request: Request, service: Service):
    return await service.create_sampling_session(parse(wire.CreateSamplingSessionRequest, await json_body(request)))


@protocol_routes.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, service: Service):
    return service.get_sampler(sampler_id)


@protocol_routes.post("/asample", openapi_extra=declared_body(wire.SampleRequest))
async def asample(request: Request, service: Service):
    return service.sample(parse(wire.SampleRequest, await json_body(request)))


# Futures ----------------------------------------------------------------------


@protocol_routes.post("/retrieve_future", openapi_extra=declared_body(wire.RequestIdRequest))
async def retrieve_future(request: Request, service: Service):
    store = service.store
    request_id = parse(wire.RequestIdRequest, await json_body(request)).request_id
    if not store.known(request_id):
        raise WireError(404, f"unknown or expired request_id {request_id!r}")
    task = await store.wait(request_id)
    if task is None:
        return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
    store.mark_fetched(request_id)
    if task.cancelled():
        return {"error": "the request was cancelled", "category": "user"}
    if task.exception() is not None:
        return json_response(error_result(task.exception()))
    return result_response(task.result(), PROTOBUF_MEDIA_TYPE in request.headers.get("accept", ""))


@protocol_routes.post("/cancel_future", openapi_extra=declared_body(wire.RequestIdRequest))
async def cancel_future(request: Request, service: Service):
    request_id = parse(wire.RequestIdRequest, await json_body(request)).request_id
    if not service.store.known(request_id):
        raise WireError(404, f"unknown or expired request_id {request_id!r}")
    service.store.cancel(request_id)
    return json_response(None)


# MinT's own extensions (mindlab-toolkit's `mint.mint`) are no part of the Tinker protocol: say so, not a bare 404.


@protocol_routes.post("/mint/{endpoint:path}", include_in_schema=False)
async def mint_extension(endpoint: str):
    raise WireError(
        404,
        f"/api/v1/mint/{endpoint[:100]} is a MinT-only extension (mint.mint.forward_backward_reverse_kl, "
        "interpolate_checkpoints); sparring serves the Tinker protocol only",
    )
