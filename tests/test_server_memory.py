"""`sparring serve` bounded before work: no request can make it big or deaf.

A real server process on the tiny model is sent a chat body over its
route's limit, one under it holding a prompt far longer than the context,
deeply nested JSON, and a 2 KB zstd body that inflates to 64 MB; meanwhile
a watcher asks `/healthz` every 50 ms and reads the server's resident
memory. Every answer must be the 4xx naming the problem, the memory may grow
by less than `RSS_GROWTH_BYTES` and no health check may take a second. In
process, a 10 MB prompt and one just under the character bound are refused
after tokenizing no more than a piece of them (characters counted at the
tokenizer, not wall time).
"""

from __future__ import annotations

import threading
import time

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient
from sparring_server import serving

from sparring.server import create_app
from sparring.server.limits import ServerLimits
from sparring.server.openai.prompt_bound import PIECE_CHARS, PromptBound

API_KEY = "tml-memory"
MAX_REQUEST_TOKENS = 100_000
RSS_GROWTH_BYTES = 500 << 20
HEALTH_S = 1.0
HEADERS = {"X-API-Key": API_KEY}


class Watcher(threading.Thread):
    """Asks /healthz every 50 ms and reads the server's resident memory until stopped."""

    def __init__(self, url: str, pid: int):
        super().__init__(daemon=True)
        self.url, self.process = url, psutil.Process(pid)
        self.baseline = self.peak = self.process.memory_info().rss
        self.slowest, self.failures, self.checks = 0.0, [], 0
        self.stopped = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stopped.wait(0.05):
                started = time.monotonic()
                try:
                    ok = client.get(f"{self.url}/healthz").status_code == 200
                except httpx.TransportError as error:
                    ok = False
                    self.failures.append(repr(error))
                self.slowest = max(self.slowest, time.monotonic() - started)
                self.checks += ok
                self.peak = max(self.peak, self.process.memory_info().rss)

    def until_checks(self, count: int, timeout_s: float) -> None:
        """Keep watching (memory included) until `count` health checks were answered, or `timeout_s` passed."""
        deadline = time.monotonic() + timeout_s
        while self.checks < count and not self.failures and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    with serving(
        tiny_model_dir,
        tmp_path_factory.mktemp("memory"),
        API_KEY,
        extra_args=("--max-request-tokens", str(MAX_REQUEST_TOKENS)),
    ) as server:
        yield server


def _bomb(inflated_bytes: int) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=19).compress(b"\0" * inflated_bytes)


def test_oversized_deep_and_inflating_requests_leave_the_server_small_and_answering(served):
    chat = f"{served.url}/v1/chat/completions"
    watcher = Watcher(served.url, served.process.pid)
    watcher.start()
    try:
        with httpx.Client(headers=HEADERS, timeout=30) as client:
            over = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"a" * (8 << 20) + b'"}]}'
            answer = client.post(chat, content=over, headers={"content-type": "application/json"})
            assert answer.status_code == 413 and "limit" in answer.json()["detail"], answer.text
            long_prompt = {"model": str(served.base_dir), "messages": [{"role": "user", "content": "a" * (3 << 20)}]}
            answer = client.post(chat, json={**long_prompt, "model": _served_name(client, served.url)})
            assert answer.status_code == 400 and "context" in answer.json()["error"]["message"], answer.text
            for route in ("/v1/chat/completions", "/api/v1/asample", "/api/v1/forward_backward"):
                deep = client.post(
                    f"{served.url}{route}",
                    content=b"[" * 200_000 + b"]" * 200_000,
                    headers={"content-type": "application/json"},
                )
                assert deep.status_code == 400, (route, deep.text)
            bomb = _bomb(64 << 20)
            assert len(bomb) < 4096
            protobuf = {"content-type": "application/x-protobuf", "content-encoding": "zstd"}
            for _ in range(3):
                answer = client.post(f"{served.url}/api/v1/forward_backward", content=bomb, headers=protobuf)
                assert answer.status_code == 413 and "inflates" in answer.json()["detail"], answer.text
    finally:
        watcher.until_checks(3, timeout_s=10)  # on a fast host every request can be answered within one 50 ms tick
        watcher.stopped.set()
        watcher.join(timeout=10)
    growth = watcher.peak - watcher.baseline
    print(
        f"\nserver RSS {watcher.baseline / 2**20:.0f} MB -> peak {watcher.peak / 2**20:.0f} MB; "
        f"{watcher.checks} health checks, slowest {watcher.slowest:.2f} s"
    )
    assert not watcher.failures and watcher.checks >= 3
    assert watcher.slowest < HEALTH_S
    assert growth < RSS_GROWTH_BYTES


def _served_name(client: httpx.Client, url: str) -> str:
    return client.get(f"{url}/v1/models").json()["data"][0]["id"]


def test_openapi_lists_the_error_statuses_of_every_route(served):
    schema = httpx.get(f"{served.url}/openapi.json", headers=HEADERS).json()
    for path in ("/v1/chat/completions", "/api/v1/asample", "/api/v1/forward_backward", "/api/v1/retrieve_future"):
        declared = set(schema["paths"][path]["post"]["responses"])
        assert {"200", "400", "401", "404", "413"} <= declared, (path, declared)
    assert "415" in schema["paths"]["/api/v1/forward_backward"]["post"]["responses"]


def test_a_prompt_far_over_the_context_is_refused_after_tokenizing_a_piece_of_it(tiny_model_dir, tmp_path):
    app = create_app(str(tiny_model_dir), base_dir=tmp_path)  # the default limits: a chat body of up to 33 MB
    tokenizer = app.state.tinker.engine.loaded.renderer.tokenizer
    tokenized: list[int] = []
    encode = tokenizer.encode

    def counted_encode(text, *args, **kwargs):
        tokenized.append(len(text))
        return encode(text, *args, **kwargs)

    tokenizer.encode = counted_encode  # the same tokenizer, counting the characters it is given
    try:
        client = TestClient(app)  # no `with`: no lifespan, so the engine shared with other tests is left alone
        name = client.get("/v1/models").json()["data"][0]["id"]
        context = app.state.tinker.engine.max_context

        def chat(content: str) -> httpx.Response:
            return client.post(
                "/v1/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": content}], "max_tokens": 1},
            )

        assert chat("hi").status_code == 200 and sum(tokenized) > 0  # the counter sees the tokenizer's work
        tokenized.clear()
        ten_mb = chat("a" * (10 << 20))
        assert ten_mb.status_code == 400 and "context" in ten_mb.json()["error"]["message"]
        assert sum(tokenized) == 0  # the character bound alone refused it

        room = context - 1
        just_under = ("hi " * (room * PromptBound(tokenizer).max_token_chars))[
            : room * PromptBound(tokenizer).max_token_chars
        ]
        refused = chat(just_under)
        assert refused.status_code == 400 and "context" in refused.json()["error"]["message"]
        print(f"\n{len(just_under)} characters, {sum(tokenized)} tokenized before the refusal")
        assert sum(tokenized) <= 2 * PIECE_CHARS and sum(tokenized) < len(just_under) / 2
    finally:
        del tokenizer.encode


def test_a_zstd_bomb_under_the_routes_size_limit_is_refused_within_a_second(tiny_model_dir, tmp_path):
    app = create_app(str(tiny_model_dir), base_dir=tmp_path)  # the default limits: forward_backward takes up to 161 MiB
    bomb = _bomb(64 << 20)
    assert len(bomb) < 4096 and (64 << 20) < ServerLimits().body_limit(
        "/api/v1/forward_backward"
    )  # under the size bound
    client = TestClient(app)  # no `with`: no lifespan, so the engine shared with other tests is left alone
    protobuf = {"content-type": "application/x-protobuf", "content-encoding": "zstd"}
    started = time.perf_counter()
    answer = client.post("/api/v1/forward_backward", content=bomb, headers=protobuf)
    elapsed = time.perf_counter() - started
    print(f"\n{len(bomb)} B of zstd inflating to 64 MiB: {answer.status_code} in {elapsed:.3f} s")
    assert answer.status_code == 413 and "compression bomb" in answer.json()["detail"], answer.text
    assert elapsed < 1.0
    import zstandard

    honest = zstandard.ZstdCompressor().compress(
        b"not protobuf at all, " * 1000
    )  # inflates within the ratio: decoded, then refused as protobuf
    assert client.post("/api/v1/forward_backward", content=honest, headers=protobuf).status_code == 400
