"""The client the `sparring serve` abuse tests (tests/test_server_abuse.py, tests/test_server_lifecycle.py) send
with: `Abuser` counts what it sent and what went wrong (5xx answers and hangs, checked last), `refused` reads a
4xx's message, `datum` builds a training datum of a given length; and the tiny model with a 4,096-token context
they are served."""

from __future__ import annotations

from pathlib import Path

import httpx

from sparring.models import build_tiny_model

API_KEY = "tml-abuse"
BOUND_S = 30.0
"""No request may take longer than this (a hang)."""
CONTEXT = 4096
MAX_REQUEST_TOKENS = 100_000
LONG = {"max_tokens": CONTEXT - 8, "stop": [], "seed": 0}
"""Sampling that runs to the end of the context (no stop token ends it): seconds of decoding."""


class Abuser:
    """An HTTP client that counts what it sent and what went wrong: 5xx answers and hangs."""

    sent = 0
    server_errors: list[str] = []
    hangs: list[str] = []

    def __init__(self, url: str, api_key: str = API_KEY):
        self.client = httpx.Client(base_url=url, headers={"X-API-Key": api_key}, timeout=BOUND_S)

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        Abuser.sent += 1
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.TimeoutException:
            Abuser.hangs.append(f"{method} {path}")
            raise
        if response.status_code >= 500:
            Abuser.server_errors.append(f"{method} {path} -> {response.status_code} {response.text[:200]}")
        return response

    def post(self, path: str, body=None, **kwargs) -> httpx.Response:
        return self.request("POST", path, json=body, **kwargs)

    def tinker(self, path: str, body) -> httpx.Response:
        return self.post(f"/api/v1/{path}", body)

    def result(self, answer: httpx.Response) -> dict:
        assert answer.status_code == 200, answer.text
        while True:
            reply = self.tinker("retrieve_future", {"request_id": answer.json()["request_id"]}).json()
            if reply.get("type") != "try_again":
                return reply

    def session(self) -> str:
        return self.tinker("create_session", {"tags": []}).json()["session_id"]

    def model(self, session: str, base_model: str, seq: int = 0) -> str:
        created = self.tinker(
            "create_model",
            {
                "session_id": session,
                "model_seq_id": seq,
                "base_model": base_model,
                "lora_config": {"rank": 2, "seed": 0},
            },
        )
        return self.result(created)["model_id"]

    def sampler(self, session: str, seq: int = 0, **source) -> str:
        answer = self.tinker(
            "create_sampling_session", {"session_id": session, "sampling_session_seq_id": seq, **source}
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["sampling_session_id"]

    def sample(self, sampler: str, tokens: list[int], num_samples: int = 1, **params) -> httpx.Response:
        prompt = {"chunks": [{"type": "encoded_text", "tokens": tokens}]}
        return self.tinker(
            "asample",
            {"sampling_session_id": sampler, "num_samples": num_samples, "prompt": prompt, "sampling_params": params},
        )


def refused(answer: httpx.Response, status: int, *words: str) -> None:
    """A JSON 4xx of that status whose message names every word."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    message = body["detail"] if "detail" in body else body["error"]["message"]
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def datum(length: int) -> dict:
    tokens = [5 + n % 300 for n in range(length)]
    targets = {"data": tokens, "dtype": "int64", "shape": [length]}
    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "loss_fn_inputs": {"target_tokens": targets, "weights": {"data": [1.0] * length, "dtype": "float32"}},
    }


def build_long_model(directory: Path) -> Path:
    """The tiny model with a 4,096-token context."""
    return build_tiny_model(directory / "tiny", seed=0, max_position_embeddings=CONTEXT)
