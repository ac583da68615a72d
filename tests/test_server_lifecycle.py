"""`sparring serve`'s own limits and its shutdown, each on a server of its own: the requests of a client whose
heartbeat stopped are cancelled, a body over the limit is refused before it is read, SIGTERM drains for its bound
and exits while sampling runs, and a malformed `--adapter` option is refused in one line. Every request is counted
by `Abuser`; none may get a 5xx or hang."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from abuse_client import API_KEY, BOUND_S, LONG, Abuser, build_long_model
from fastapi.testclient import TestClient
from sparring_server import serving

from sparring.server import ServerLimits, create_app


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory) -> Path:
    return build_long_model(tmp_path_factory.mktemp("tiny-long"))


def test_the_requests_of_a_client_whose_heartbeat_stopped_are_cancelled(long_model_dir, tmp_path):
    app = create_app(str(long_model_dir), base_dir=tmp_path)
    app.state.tinker.abandon_s = 0.5  # the SDK heartbeats every 10 s; the default is 120 s
    with TestClient(
        app, headers={"X-API-Key": API_KEY}
    ) as client:  # its lifespan drains, never closes the shared engine
        inside = Abuser("http://testserver")
        inside.client = client
        gone = inside.session()
        inside.tinker("session_heartbeat", {"session_id": gone})
        running = inside.sample(inside.sampler(gone, base_model=str(long_model_dir)), [5, 6, 7], num_samples=16, **LONG)
        time.sleep(1.0)
        alive = inside.session()
        inside.tinker(
            "session_heartbeat", {"session_id": alive}
        )  # any request sweeps: the silent client's work is cancelled
        assert "cancelled" in inside.result(running)["error"]
        started = time.monotonic()
        inside.result(
            inside.sample(inside.sampler(alive, base_model=str(long_model_dir)), [5, 6, 7], max_tokens=2, stop=[])
        )
        assert time.monotonic() - started < 5.0, "the engine went on decoding the abandoned request"


def test_a_body_over_the_limit_is_refused_before_it_is_read(long_model_dir, tmp_path):
    app = create_app(str(long_model_dir), base_dir=tmp_path, limits=ServerLimits(max_body_bytes=1000))
    client = TestClient(app)  # no `with`: no lifespan, so the engine shared with other tests is left alone
    Abuser.sent += 2
    declared = client.post(
        "/api/v1/create_session", content=b"{" + b" " * 2000 + b"}", headers={"content-type": "application/json"}
    )
    assert declared.status_code == 413 and "1000 bytes" in declared.json()["detail"]
    streamed = client.post(
        "/v1/chat/completions",
        content=iter([b"{", b" " * 800, b" " * 800, b"}"]),
        headers={"content-type": "application/json"},
    )
    assert streamed.status_code == 413 and "1000 bytes" in streamed.json()["detail"]


def test_sigterm_drains_for_the_bound_and_exits_while_sampling_runs(long_model_dir, tmp_path):
    with serving(long_model_dir, tmp_path, API_KEY, extra_args=("--drain-s", "2")) as server:
        client = Abuser(server.url)
        sampler = client.sampler(client.session(), base_model=str(long_model_dir))
        running = client.sample(sampler, [5, 6, 7], num_samples=16, **LONG)
        polling = threading.Thread(target=_poll_once, args=(server.url, running.json()["request_id"]), daemon=True)
        polling.start()
        time.sleep(1.0)
        started = time.monotonic()
        os.kill(server.process.pid, signal.SIGTERM)
        server.process.wait(timeout=2 + 15)
        took = time.monotonic() - started
        print(f"\nSIGTERM: exited {took:.1f} s after the signal, status {server.process.returncode} (--drain-s 2)")
    assert took < 2 + 8, f"exited {took:.1f} s after SIGTERM with --drain-s 2"


def test_serve_refuses_a_malformed_adapter_option_in_one_line():
    from typer.testing import CliRunner

    from sparring.cli import app as cli_app

    outcome = CliRunner().invoke(cli_app, ["serve", "--adapter", "no-equals-sign"])
    assert outcome.exit_code == 2 and "NAME=PATH" in outcome.output and "Traceback" not in outcome.output


def _poll_once(url: str, request_id: str) -> None:
    """A client long-polling for the running request's result when SIGTERM comes (the server may drop it)."""
    try:
        httpx.post(
            f"{url}/api/v1/retrieve_future",
            json={"request_id": request_id},
            headers={"X-API-Key": API_KEY},
            timeout=BOUND_S,
        )
    except httpx.TransportError:
        pass


# Counts -----------------------------------------------------------------------------------------


def test_these_requests_got_no_5xx_and_no_hangs():
    assert not Abuser.server_errors, Abuser.server_errors
    assert not Abuser.hangs, Abuser.hangs
