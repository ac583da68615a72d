"""`serve_in_thread`: an ASGI app served by uvicorn from a daemon thread of this process.

Two servers live inside a training process rather than in one of their own:
the episode endpoint (`openai.episode_server`, loopback only) and the Ray
runner's model-call server (`runners.episode_link`, reachable from the
cluster). Both start the same way: bind a free port first (so the port is
known before uvicorn runs), serve from a daemon thread, and return only once
uvicorn listens.
"""

from __future__ import annotations

import socket
import threading
import time

_START_TIMEOUT_S = 30.0


def serve_in_thread(app, host: str, name: str):
    """Serve the ASGI `app` on a free port of `host` from a daemon thread; (uvicorn server, thread, port) once it
    listens."""
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            listener.close()
            raise RuntimeError(f"the {name} server did not start on {host}")
        time.sleep(0.01)
    return server, thread, port
