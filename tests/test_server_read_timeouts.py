"""`sparring serve` closes connections that send a request too slowly, on 127.0.0.1 only: a client that sends part of
its headers (or nothing) and stalls is disconnected within the header timeout, one that stalls mid-body within the
body timeout, and a client that sends its request in time is answered and kept alive as before."""

import socket
import threading
import time

import pytest
import uvicorn

from sparring.server.read_timeouts import ReadTimeouts
from sparring.server.shutdown import uvicorn_config

HEADER_S, BODY_S = 0.5, 1.0


async def echo_length(scope, receive, send):
    """A tiny ASGI app: reads the whole body and answers its length."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = str(len(body)).encode()
    headers = [(b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def port():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    config = uvicorn_config(echo_length, "127.0.0.1", 0, drain_s=0.1, timeouts=ReadTimeouts(HEADER_S, BODY_S))
    config.lifespan = "off"
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield listener.getsockname()[1]
    server.should_exit = True
    thread.join(10)


def seconds_until_closed(port: int, sent: bytes, limit_s: float = 5.0) -> float:
    """Connect, send `sent`, then stall: seconds until the server closes the connection (fails past `limit_s`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit_s) as client:
        start = time.monotonic()
        client.sendall(sent)
        received = b""
        while chunk := client.recv(4096):  # a timeout here (socket.timeout) fails the test: never closed
            received += chunk
        assert received == b"", received  # closed without an answer
        return time.monotonic() - start


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sent", [b"", b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Le"], ids=["nothing", "partial header"])
def test_a_client_that_stalls_before_its_headers_end_is_disconnected_within_the_header_timeout(port, sent):
    assert HEADER_S * 0.8 <= seconds_until_closed(port, sent) < HEADER_S + 1.5


@pytest.mark.timeout(30)
def test_a_client_that_stalls_mid_body_is_disconnected_within_the_body_timeout(port):
    sent = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
    assert BODY_S * 0.8 <= seconds_until_closed(port, sent) < BODY_S + 1.5


@pytest.mark.timeout(30)
def test_requests_sent_in_time_are_answered_on_one_connection(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        for body in (b"abc", b"hello"):
            client.sendall(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body))
            time.sleep(HEADER_S * 0.6)  # slower than nothing, within both timeouts
            client.sendall(body)
            answer = b""
            while not answer.endswith(b"\r\n\r\n" + str(len(body)).encode()):
                answer += client.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            time.sleep(HEADER_S * 0.6)  # the next request's clock starts at this response


@pytest.mark.timeout(200)
def test_sparring_serve_closes_slow_header_and_slow_body_connections_at_its_timeouts(tiny_model_dir, tmp_path):
    from sparring_server import serving

    timeouts = ("--header-timeout-s", "1", "--body-timeout-s", "1.5")
    with serving(tiny_model_dir, tmp_path, api_key="k", extra_args=timeouts) as served:
        port = int(served.url.rsplit(":", 1)[1])
        assert 0.8 <= seconds_until_closed(port, b"GET /api/v1/healthz HTTP/1.1\r\nHost: a\r\n") < 2.5
        headers = b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\n"
        headers += b"Content-Length: 100\r\n\r\n"
        assert 1.2 <= seconds_until_closed(port, headers + b'{"model": "') < 3.0
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:  # still serving
            client.sendall(b"GET /api/v1/healthz HTTP/1.1\r\nHost: a\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
    assert "Traceback" not in served.log.read_text(), served.log.read_text()  # a cut body is no 500
