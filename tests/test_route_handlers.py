"""The routes of both protocols are named handlers: each is called directly with its service, or mounted alone on a
bare app (no `create_app`, no other route), and answers as it does inside the served app."""

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from fastapi import Depends, FastAPI
from starlette.requests import Request

from sparring import SamplingClient, ServiceClient, types
from sparring.rollout import FrozenChatModel
from sparring.server.openai import routes as openai_routes
from sparring.server.openai.chat_service import ChatService
from sparring.server.openai.served_models import ServedModels
from sparring.server.provided import Provide
from sparring.server.tinker import FutureStore, TinkerService, WireError, wire
from sparring.server.tinker import routes as tinker_routes

PROMPT = [5, 9, 13, 17, 21]


def request_of(body: dict | None = None, authorization: str | None = None) -> Request:
    """A real ASGI request carrying `body` as JSON (and an Authorization header)."""
    raw = json.dumps(body).encode() if body is not None else b""
    headers = [(b"authorization", authorization.encode())] if authorization else []

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}, receive)


def alone(handlers: dict, key: str, service) -> FastAPI:
    """A bare app with only `handlers` (path -> handler) mounted, on `service`."""
    app = FastAPI()
    for path, handler in handlers.items():
        app.add_api_route(path, handler, methods=["POST"], dependencies=[Depends(Provide(key, service))])
    return app


def in_process(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://alone")


@pytest.fixture(scope="module")
def service(tiny_model_dir, tmp_path_factory):
    return ServiceClient(base_dir=tmp_path_factory.mktemp("handlers"))


def test_tinker_handlers_alone_sample_with_only_the_last_n_prompt_logprobs(tiny_model_dir, service):
    tinker = TinkerService(str(tiny_model_dir), service, FutureStore())
    app = alone(
        {
            "/create_sampling_session": tinker_routes.create_sampling_session,
            "/asample": tinker_routes.asample,
            "/retrieve_future": tinker_routes.retrieve_future,
        },
        tinker_routes.SERVICE_KEY,
        tinker,
    )

    async def sampled(client: httpx.AsyncClient, sampler_id: str, last_n: int) -> dict:
        body = {
            "sampling_session_id": sampler_id,
            "num_samples": 2,
            "prompt": {"chunks": [{"tokens": PROMPT}]},
            "sampling_params": {"max_tokens": 3, "seed": 1},
        }
        request_id = (
            await client.post("/asample", json={**body, "prompt_logprobs": True, "prompt_logprobs_last_n": last_n})
        ).json()["request_id"]
        result = {"type": "try_again"}
        while result.get("type") == "try_again":
            result = (await client.post("/retrieve_future", json={"request_id": request_id})).json()
        return result

    async def scenario():
        capabilities = await tinker_routes.capabilities(tinker)
        assert capabilities["supported_models"][0]["max_context_length"] == tinker.engine.max_context
        session_id = (await tinker_routes.create_session(request_of({"sdk_version": "test"}), tinker))["session_id"]
        with pytest.raises(WireError, match="unknown sampling_session_id 'sample-nobody'"):
            await tinker_routes.get_sampler("sample-nobody", tinker)
        async with in_process(app) as client:
            created = await client.post(
                "/create_sampling_session", json={"session_id": session_id, "sampling_session_seq_id": 0}
            )
            sampler_id = created.json()["sampling_session_id"]
            return await sampled(client, sampler_id, last_n=2), await sampled(client, sampler_id, last_n=len(PROMPT))

    result, too_many = asyncio.run(scenario())
    scores = tinker.base_sampler.compute_logprobs(types.ModelInput.from_ints(PROMPT)).result(timeout=60)
    assert len(result["sequences"]) == 2
    assert result["prompt_logprobs"][:3] == [None, None, None]
    assert result["prompt_logprobs"][3:] == pytest.approx(scores[3:])
    assert too_many == {"error": "prompt_logprobs_last_n must be below the prompt length 5, got 5", "category": "user"}


def test_openai_handlers_alone_answer_from_their_chat_service(tiny_model_dir, service):
    frozen = FrozenChatModel(service.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 3})
    chat = ChatService(ServedModels({"tiny": frozen}), api_key="secret")
    app = alone({"/v1/chat/completions": openai_routes.chat_completions}, openai_routes.SERVICE_KEY, chat)

    async def scenario():
        listed = await openai_routes.list_models(request_of(authorization="Bearer secret"), chat)
        refused = await openai_routes.list_models(request_of(authorization="Bearer wrong"), chat)
        async with in_process(app) as client:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
            reply = await client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer secret"})
            unserved = await client.post(
                "/v1/chat/completions", json={**body, "model": "nobody"}, headers={"Authorization": "Bearer secret"}
            )
        return listed, refused, reply, unserved

    listed, refused, reply, unserved = asyncio.run(scenario())
    assert [model["id"] for model in listed["data"]] == ["tiny"]
    assert refused.status_code == 401 and json.loads(refused.body)["error"]["code"] == "invalid_api_key"
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] <= 2
    assert unserved.status_code == 404 and unserved.json()["error"]["param"] == "model"


def test_a_handler_mounted_without_its_service_names_the_fix():
    app = FastAPI()
    app.add_api_route("/v1/models", openai_routes.list_models)

    async def listed():
        async with in_process(app) as client:
            await client.get("/v1/models")

    with pytest.raises(
        RuntimeError, match=r"no 'chat_service' on this request; mount the route with dependencies=\[Depends\(Provide"
    ):
        asyncio.run(listed())


class EngineSurface:
    """An engine whose internals (`loaded`, `bank`) are off limits: only its public surface answers."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        if name in ("loaded", "bank"):
            raise AssertionError(f"the Tinker service reached into engine.{name}")
        return getattr(self._engine, name)


def test_the_tinker_service_asks_its_client_and_never_reaches_into_the_engine(tiny_model_dir, service, monkeypatch):
    base = service.create_sampling_client(base_model=str(tiny_model_dir))
    guarded = SamplingClient(EngineSurface(base.engine), None, base.base_model)
    monkeypatch.setattr(service, "create_sampling_client", lambda **options: guarded)
    tinker = TinkerService(str(tiny_model_dir), service, FutureStore(), served_names=["tiny"])
    same_model = f"{tiny_model_dir}/."  # another spelling of the served model's path
    assert tinker.check_base_model(same_model) == same_model

    async def scenario():
        session_id = (await tinker_routes.create_session(request_of({"sdk_version": "test"}), tinker))["session_id"]
        request = {"session_id": session_id, "model_seq_id": 0, "base_model": "tiny", "lora_config": {"rank": 2}}
        model_id = tinker.create_model(wire.CreateModelRequest(**request))["model_id"]
        info = await tinker.get_info(model_id)
        client = await tinker.model(model_id).lane.client
        return info, client.save_state("surface").result(timeout=60).path

    info, saved = asyncio.run(scenario())
    assert info["model_data"]["tokenizer_id"] == base.engine.model_dir and info["lora_rank"] == 2
    assert info["model_data"]["arch"] == base.engine.model_config.model_type
    assert tinker._lora_shape(Path(saved))["rank"] == 2
