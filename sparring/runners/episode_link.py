"""Episode links: a workflow in another process whose model calls come back to the trainer.

When a workflow runs on a Ray worker (`ray.py`), its models must still be
the trainer's: sampled by the trainer's engine, batched with every other
episode's calls, and recorded on the episode's recorder in the trainer, so
the trained tokens and logprobs are exactly the sampled ones and timelines
merge as they do in process. Two ends of one small HTTP protocol do that:

- `ModelCallServer` (trainer): opens an `EpisodeSession` per episode (its
  tuner, recorder and event loop, under a fresh 256-bit key) and serves
  `POST /episodes/start` (the worker says the episode's own time starts) and
  `POST /episodes/generate` (one model call: which model, which agent,
  messages, tools, sampling). A call runs `ChatModel.generate` on the
  trainer's event loop with the episode's recorder, exactly as an in-process
  call would. The key is the only credential, is looked up exactly, and dies
  with the session, so the server may listen beyond loopback (a multi-node
  cluster) and still serves nothing but live episodes.
- `RemoteChatModel` (worker): a `ChatModel` whose calls go over an
  `EpisodeLink` (the session's URL and key). It is built from the
  `RemoteModelSpec` of each trainer model, keeps `agent`/`role` like any chat
  model (so `as_agent` and `tuner.chat_model` route as usual), and returns
  full `ChatResponse`s (message, tokens, logprobs, stop reason). It records
  nothing itself: the trainer already has.

The protocol is JSON, not the OpenAI format: OpenAI's reply has no token ids
and its key names one agent, while a workflow names agents and roles freely.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response

from ..integrations import TunerHandle
from ..rollout import ChatModel, ChatResponse, EpisodeRecorder, ModelRouter
from ..rollout.recorder import EpisodeClosedError
from ..server.in_thread import serve_in_thread

log = logging.getLogger(__name__)

SESSION_KEY_PREFIX = "sk-sparring-worker-"
# Errors a model call raises in process, raised as the same type on the worker; any other arrives as RemoteModelError.
_ERROR_TYPES = {
    "ValueError": ValueError,
    "TypeError": TypeError,
    "KeyError": KeyError,
    "EpisodeClosedError": EpisodeClosedError,
}


class RemoteModelError(RuntimeError):
    """A model call that failed in the trainer process with an error the worker has no type for; names the original."""


@dataclass(frozen=True)
class RemoteModelSpec:
    """One of the trainer's chat models, as a worker sees it: enough to name it in calls."""

    kind: Literal["policy", "auxiliary"]
    """Which of the tuner's dicts it is in."""
    name: str
    """Its key in that dict."""
    agent: str
    """The agent name its calls are recorded under (as the trainer's model has it)."""
    role: str | None
    """The agent's role (target tag)."""
    trainable: bool
    """Whether its calls are trained on."""


@dataclass(frozen=True)
class RemoteTunerSpec:
    """What a worker needs to build an episode's tuner handle: where to call, with which key, which models."""

    base_url: str
    """The trainer's model-call server, e.g. http://127.0.0.1:41234."""
    key: str
    """The episode's session key (the only credential)."""
    models: tuple[RemoteModelSpec, ...]
    """Every policy and auxiliary model of the trainer's tuner, in order."""

    def tuner(self, link: EpisodeLink) -> TunerHandle:
        """A tuner handle whose models call the trainer over `link`."""
        models = {
            (spec.kind, spec.name): RemoteChatModel(link, spec.kind, spec.name, spec.agent, spec.role, spec.trainable)
            for spec in self.models
        }
        policies = {name: model for (kind, name), model in models.items() if kind == "policy"}
        auxiliary = {name: model for (kind, name), model in models.items() if kind == "auxiliary"}
        return TunerHandle(policies=policies, auxiliary_models=auxiliary)


@dataclass
class EpisodeSession:
    """One episode whose workflow runs elsewhere: the trainer's side of its link."""

    key: str
    """The session key the worker sends as its bearer token."""
    tuner: ModelRouter
    """The trainer's tuner handle: the chat models calls are routed to."""
    recorder: EpisodeRecorder
    """The episode's recorder in the trainer: every call is recorded here."""
    loop: asyncio.AbstractEventLoop
    """The event loop the episode runs in; model calls are run on it, as in-process calls are."""
    started: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the worker starts the workflow (time spent queued for a worker is not the episode's)."""
    worker_pid: int | None = None
    """The process the workflow runs in, as the worker reported it."""


class ModelCallServer:
    """Serves model calls of open episode sessions over HTTP, from a background thread."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.sessions: dict[str, EpisodeSession] = {}
        self._lock = threading.Lock()
        self.app = FastAPI(title="sparring model calls from workers")
        self.app.post("/episodes/start")(self._start_episode)
        self.app.post("/episodes/generate")(self._generate)
        self.base_url = self._serve()

    def open(self, tuner: ModelRouter, recorder: EpisodeRecorder) -> tuple[EpisodeSession, RemoteTunerSpec]:
        """A session for one episode (closed with its recorder at the latest) and the spec its worker builds a tuner
        from."""
        session = EpisodeSession(
            SESSION_KEY_PREFIX + secrets.token_urlsafe(32), tuner, recorder, asyncio.get_running_loop()
        )
        with self._lock:
            self.sessions[session.key] = session
        recorder.on_close(lambda: self.close(session))
        models = [("policy", name, model) for name, model in tuner.policies.items()]
        models += [("auxiliary", name, model) for name, model in tuner.auxiliary_models.items()]
        specs = tuple(
            RemoteModelSpec(kind, name, model.agent, model.role, bool(model.trainable)) for kind, name, model in models
        )
        return session, RemoteTunerSpec(self.base_url, session.key, specs)

    def close(self, session: EpisodeSession) -> None:
        """End a session: its key stops working (a worker still calling gets EpisodeClosedError)."""
        with self._lock:
            self.sessions.pop(session.key, None)

    def _session(self, request: Request) -> EpisodeSession:
        header = request.headers.get("authorization", "")
        key = header[7:].strip() if header[:7].lower() == "bearer " else ""
        with self._lock:
            session = self.sessions.get(key)
        if session is None:
            raise EpisodeClosedError("no open episode has this key: it is unknown, or its episode has ended")
        return session

    async def _start_episode(self, request: Request) -> Response:
        try:
            session = self._session(request)
            body = await _json_body(request)
        except (EpisodeClosedError, ValueError) as error:
            return _error_response(error)
        session.worker_pid = body.get("pid")
        session.loop.call_soon_threadsafe(session.started.set)
        return _json_response({"ok": True})

    async def _generate(self, request: Request) -> Response:
        try:
            session = self._session(request)
            body = await _json_body(request)
            model = _routed_model(session.tuner, body.get("model") or {})
            call = model.generate(
                body.get("messages"),
                body.get("tools"),
                tool_choice=body.get("tool_choice"),
                n=int(body.get("n", 1)),
                recorder=session.recorder,
                **(body.get("sampling") or {}),
            )
            # On the episode's own loop, as an in-process call runs: batched with the others, any sampler backend.
            replies = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, session.loop))
        except Exception as error:  # noqa: BLE001 - sent back to the worker, raised there in the workflow
            return _error_response(error)
        return _json_response({"replies": [_reply_body(reply) for reply in replies]})

    def _serve(self) -> str:
        self._server, self._thread, port = serve_in_thread(self.app, self.host, "sparring-model-calls")
        atexit.register(self.stop)
        return f"http://{self.host}:{port}"

    def stop(self) -> None:
        """Stop serving (sessions still open fail their next call); a second call does nothing."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def _routed_model(tuner: ModelRouter, named: dict) -> ChatModel:
    kind, name = named.get("kind"), named.get("name")
    models = tuner.policies if kind == "policy" else tuner.auxiliary_models if kind == "auxiliary" else None
    if models is None or name not in models:
        raise KeyError(f"the episode has no {kind} model {name!r}")
    model = models[name]
    agent, role = named.get("agent", model.agent), named.get("role", model.role)
    return model if (agent, role) == (model.agent, model.role) else model.as_agent(agent, role)


async def _json_body(request: Request) -> dict:
    try:
        body = json.loads(await request.body() or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return body


def _reply_body(reply: ChatResponse) -> dict:
    return {
        "message": reply.message,
        "tokens": reply.tokens,
        "logprobs": reply.logprobs,
        "stop_reason": reply.stop_reason,
        "prompt_tokens": reply.prompt_tokens,
    }


def _json_response(body: dict, status: int = 200) -> Response:
    # json.dumps writes floats exactly as repr does (they parse back to the same double); -inf logprobs survive too.
    return Response(json.dumps(body), status_code=status, media_type="application/json")


def _error_response(error: Exception) -> Response:
    status = (
        401
        if isinstance(error, EpisodeClosedError)
        else 400
        if isinstance(error, (ValueError, TypeError, KeyError))
        else 500
    )
    message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return _json_response({"error": {"type": type(error).__name__, "message": str(message)}}, status)


class EpisodeLink:
    """A worker's connection to its episode's session in the trainer (one HTTP client, opened with `async with`)."""

    def __init__(self, base_url: str, key: str) -> None:
        self.base_url = base_url
        self.key = key
        self._client = None

    async def __aenter__(self) -> EpisodeLink:
        import httpx

        # TCP_NODELAY: a request goes out as headers then body, and Nagle's algorithm would hold the body for the
        # server's delayed ACK (~40 ms a call). verify=False: the server is plain HTTP, and loading CA certificates for
        # nothing costs ~70 ms an episode. trust_env=False: a proxy set for the outside world must not carry these.
        transport = httpx.AsyncHTTPTransport(verify=False, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=httpx.Timeout(None, connect=30.0),
            transport=transport,
            trust_env=False,
        )
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._client.aclose()

    async def start(self) -> None:
        """Tell the trainer the workflow starts now (its timeout counts from here)."""
        await self._post("/episodes/start", {"pid": os.getpid()})

    async def generate(
        self, model: RemoteChatModel, messages, tools, tool_choice, n: int, sampling: dict
    ) -> list[ChatResponse]:
        named = {"kind": model.kind, "name": model.name, "agent": model.agent, "role": model.role}
        body = await self._post(
            "/episodes/generate",
            {
                "model": named,
                "messages": messages,
                "tools": tools,
                "tool_choice": tool_choice,
                "n": n,
                "sampling": sampling,
            },
        )
        return [ChatResponse(**reply) for reply in body["replies"]]

    async def _post(self, path: str, body: dict) -> dict:
        if self._client is None:
            raise RuntimeError("the episode link is not open: use `async with EpisodeLink(...)`")
        response = await self._client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        answer = response.json()
        if response.status_code != 200:
            error = answer.get("error", {})
            kind, message = error.get("type", "Error"), error.get("message", response.text)
            raise _ERROR_TYPES[kind](message) if kind in _ERROR_TYPES else RemoteModelError(f"{kind}: {message}")
        return answer


@dataclass(eq=False)
class RemoteChatModel(ChatModel):
    """A trainer's chat model called from a worker: sampled and recorded in the trainer, replies returned in full."""

    link: EpisodeLink
    """The episode's link to the trainer."""
    kind: Literal["policy", "auxiliary"]
    """Which of the trainer tuner's dicts the model is in."""
    name: str
    """Its key there."""
    agent: str = "policy"
    """Name the trainer records the calls under."""
    role: str | None = None
    """The agent's role (target tag)."""
    trainable: bool = False
    """Whether the trainer trains on its calls."""

    async def __call__(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        **sampling: Any,
    ) -> ChatResponse:
        return (await self.generate(messages, tools, tool_choice=tool_choice, **sampling))[0]

    async def generate(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        tool_choice: str | dict | None = None,
        n: int = 1,
        recorder: EpisodeRecorder | None = None,
        **sampling: Any,
    ) -> list[ChatResponse]:
        """`n` replies; `recorder` is not used: the trainer records the call on the episode's own recorder."""
        return await self.link.generate(self, messages, tools, tool_choice, n, sampling)
