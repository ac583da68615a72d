"""The training process's episode endpoint: where HTTP agents of every episode are served.

Inside a training run nobody has started a server, yet a workflow may hand an
agent `tuner.as_base_url_api_key(...)` (for a framework that wants a URL) or
`tuner.as_openai_client(...)` (a real `openai.AsyncOpenAI`). `EpisodeServer`
is the one process-wide answer to both: a FastAPI app with the
OpenAI-compatible router over this process's `EpisodeKeys`.

- `endpoint(...)` issues a key and, on first use, serves the app on
  127.0.0.1 at a free port from a background thread (uvicorn), shut down at
  exit; nothing beyond loopback can reach it, and only episode keys work.
- `openai_client(...)` issues a key and returns an `AsyncOpenAI` whose HTTP
  client calls the same app in process (an ASGI transport): no port opens,
  yet the request goes through exactly the code an HTTP agent's does.
"""

from __future__ import annotations

import atexit
import sys
import threading

from fastapi import FastAPI

from ...rollout import ChatModel, EpisodeRecorder
from ..in_thread import serve_in_thread
from .episode_keys import EpisodeEndpoint, EpisodeKeys
from .routes import openai_router

IN_PROCESS_BASE_URL = "http://sparring.in-process/v1"


def openai_http_library():
    """The HTTP library (module) the installed `openai` SDK is built on: `httpx`, or `httpx2` in newer releases."""
    import openai

    client_class = next(cls for cls in openai.DefaultAsyncHttpxClient.__mro__ if cls.__name__ == "AsyncClient")
    return sys.modules[client_class.__module__.split(".")[0]]


class EpisodeServer:
    """One OpenAI-compatible app for this process's episode keys; served on loopback when first asked."""

    def __init__(self) -> None:
        self.keys = EpisodeKeys()
        self.app = FastAPI(title="sparring episode endpoint")
        self.app.include_router(openai_router(episodes=self.keys))
        self.base_url: str | None = None
        self._server = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def endpoint(self, chat_model: ChatModel, recorder: EpisodeRecorder) -> EpisodeEndpoint:
        """A loopback base URL and a key that route calls to `chat_model`, recorded in `recorder`'s episode."""
        base_url = self.serve()
        return EpisodeEndpoint(base_url, self.keys.issue(chat_model, recorder), chat_model.agent)

    def openai_client(self, chat_model: ChatModel, recorder: EpisodeRecorder):
        """An `openai.AsyncOpenAI` that reaches this app in process, with a key for `chat_model` in `recorder`'s
        episode."""
        import openai

        http = openai_http_library()
        transport = http.ASGITransport(app=self.app)
        return openai.AsyncOpenAI(
            base_url=IN_PROCESS_BASE_URL,
            api_key=self.keys.issue(chat_model, recorder),
            http_client=http.AsyncClient(transport=transport, timeout=None),
            max_retries=0,
        )

    def serve(self) -> str:
        """Start serving on 127.0.0.1 (once); the base URL."""
        with self._lock:
            if self.base_url is None:
                self._start()
            return self.base_url

    def _start(self) -> None:
        self._server, self._thread, port = serve_in_thread(self.app, "127.0.0.1", "sparring-episode-server")
        self.base_url = f"http://127.0.0.1:{port}/v1"
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop the loopback server (if it runs); keys stay valid for in-process clients."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server, self._thread, self.base_url = None, None, None
        if server is not None:
            server.should_exit = True
            thread.join(timeout=10)


_SERVER: EpisodeServer | None = None
_SERVER_LOCK = threading.Lock()


def episode_server() -> EpisodeServer:
    """This process's episode endpoint (created on first use)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            _SERVER = EpisodeServer()
        return _SERVER
