"""`sparring serve` speaks the Tinker wire protocol: the real `tinker` SDK against a real server process.

The scenario in tinker_scenario.py runs three ways on the tiny model: in
process on sparring's API (the expected numbers), and as a script on the
newest SDK and on 0.22 (from a small venv of its own, built once and kept
in the pytest cache), both talking to one `sparring serve` process over
loopback. Numbers must agree. Also here: bad requests get 4xx JSON errors
and never hurt another model, the protobuf codec against the SDK's own
generated code, and per-model ordering.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import tinker_scenario
from cached_venv import cached_venv
from pip_overlay import pinned
from sparring_server import serving
from typer.testing import CliRunner

import sparring
from sparring.cli import app as cli_app
from sparring.server.tinker.lanes import ModelLane

API_KEY = "tml-sparring-test"
HAS_LATEST_SDK = sys.version_info >= (3, 11)


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """A `sparring serve` process on the tiny model, with an API key; yields its base URL."""
    with serving(tiny_model_dir, tmp_path_factory.mktemp("server"), API_KEY) as served:
        yield served.url


@pytest.fixture(scope="module")
def expected(tiny_model_dir, tmp_path_factory):
    """The scenario's numbers from sparring's in-process API."""
    service = sparring.ServiceClient(base_dir=tmp_path_factory.mktemp("in-process"))
    return tinker_scenario.run(sparring.types, service, str(tiny_model_dir))


@pytest.fixture(scope="session")
def tinker_022_python(request, tmp_path_factory) -> Path:
    """Python of a venv holding only tinker 0.22 and what it needs to talk (not transformers); built once."""
    return cached_venv(request, tmp_path_factory, pinned("tinker-0.22"))


def run_sdk(python: Path | str, server_url: str, base_model: str) -> dict:
    env = {**os.environ, "TINKER_BASE_URL": server_url, "TINKER_API_KEY": API_KEY, "HF_HUB_OFFLINE": "1"}
    script = Path(__file__).with_name("tinker_scenario.py")
    done = subprocess.run([str(python), str(script), base_model], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SCENARIO ")]
    assert done.returncode == 0 and lines, f"the SDK scenario failed:\n{done.stdout}\n{done.stderr[-6000:]}"
    return json.loads(lines[-1].removeprefix("SCENARIO "))


def assert_same(got, want, where: str = "") -> None:
    if isinstance(want, dict):
        missing = set(want) - set(got) - {"vocab"}
        assert not missing, f"{where}: missing {missing}"
        for key in got:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{index}]")
    elif isinstance(want, float):
        assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-5), f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got} != {want}"


@pytest.mark.skipif(not HAS_LATEST_SDK, reason="the tinker SDK needs Python 3.11+")
def test_newest_sdk_trains_and_samples_like_the_in_process_api(server, expected, tiny_model_dir):
    got = run_sdk(sys.executable, server, str(tiny_model_dir))
    assert got["vocab"] == expected["vocab"]  # get_tokenizer() loads the served model's tokenizer, offline
    assert_same(got, expected)
    assert got["forward"]["loss"] != got["first_ppo"]["loss"] and got["sample_tokens"][0] != got["sample_tokens"][1]


@pytest.mark.skipif(not HAS_LATEST_SDK, reason="the tinker SDK needs Python 3.11+")
def test_sdk_0_22_trains_and_samples_like_the_in_process_api(server, expected, tiny_model_dir, tinker_022_python):
    assert_same(run_sdk(tinker_022_python, server, str(tiny_model_dir)), expected)


# Raw HTTP: errors and isolation --------------------------------------------------------------


def call(client: httpx.Client, path: str, body, **kwargs) -> httpx.Response:
    return client.post(f"/api/v1/{path}", json=body, **kwargs)


def result(client: httpx.Client, answer: httpx.Response) -> dict:
    assert answer.status_code == 200, answer.text
    request_id = answer.json()["request_id"]
    while True:
        reply = call(client, "retrieve_future", {"request_id": request_id}).json()
        if reply.get("type") != "try_again":
            return reply


def datum(tokens: list[int], targets: list[int]) -> dict:
    tensor = {"data": targets, "dtype": "int64", "shape": [len(targets)]}
    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "loss_fn_inputs": {"target_tokens": tensor, "weights": {"data": [1.0] * len(targets), "dtype": "float32"}},
    }


def test_bad_requests_get_json_errors_and_leave_other_models_alone(server, tiny_model_dir):
    assert httpx.post(f"{server}/api/v1/create_session", json={"tags": []}).status_code == 401
    with httpx.Client(base_url=server, headers={"X-API-Key": API_KEY}, timeout=60) as client:
        session = call(client, "create_session", {"tags": [], "sdk_version": "raw"}).json()["session_id"]
        missing = call(client, "create_model", {"session_id": session, "model_seq_id": 0})
        assert missing.status_code == 400 and "base_model" in missing.json()["detail"]
        other = call(client, "create_model", {"session_id": session, "model_seq_id": 0, "base_model": "Qwen/Qwen3-8B"})
        assert other.status_code == 400 and "not served" in other.json()["detail"]
        not_json = client.post("/api/v1/create_model", content=b"{nope", headers={"content-type": "application/json"})
        assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["detail"]
        too_deep = client.post(
            "/api/v1/create_model", content=b"[" * 100_000, headers={"content-type": "application/json"}
        )
        assert too_deep.status_code == 400 and "nested too deeply" in too_deep.json()["detail"]
        bad_proto = client.post(
            "/api/v1/forward_backward", content=b"\x0a\xff", headers={"content-type": "application/x-protobuf"}
        )
        assert bad_proto.status_code == 400 and "protobuf" in bad_proto.json()["detail"]

        models = []
        for seq in (1, 2):
            created = call(
                client,
                "create_model",
                {
                    "session_id": session,
                    "model_seq_id": seq,
                    "base_model": str(tiny_model_dir),
                    "lora_config": {"rank": 2, "seed": 0},
                },
            )
            assert result(client, created)["model_id"] == created.json()["model_id"]
            models.append(created.json()["model_id"])
        unknown = call(client, "optim_step", {"model_id": "nope:train:9", "seq_id": 1, "adam_params": {}})
        assert unknown.status_code == 404 and "nope:train:9" in unknown.json()["detail"]

        good = [datum([5, 6, 7], [6, 7, 8])]
        short = [datum([5, 6, 7], [6, 7])]

        def fb(model, seq, data):
            return call(
                client,
                "forward_backward",
                {
                    "model_id": model,
                    "seq_id": seq,
                    "forward_backward_input": {"data": data, "loss_fn": "cross_entropy"},
                },
            )

        failed = result(client, fb(models[0], 1, short))
        assert failed["category"] == "user" and "datum 0" in failed["error"] and "target_tokens" in failed["error"]
        schema = fb(models[0], 2, [{"model_input": {"chunks": "x"}}])
        assert schema.status_code == 400 and "forward_backward_input.data.0" in schema.json()["detail"]
        # The failed and the rejected request each used up their seq_id; the model and its neighbour still train.
        assert result(client, fb(models[0], 3, good))["metrics"]["loss:sum"] > 0
        assert result(client, fb(models[1], 1, good))["metrics"]["loss:sum"] > 0
        bad_step = result(
            client, call(client, "optim_step", {"model_id": models[1], "seq_id": 2, "adam_params": {"beta1": 2.0}})
        )
        assert bad_step["category"] == "user" and "beta1" in bad_step["error"]
        path_escape = call(
            client,
            "load_weights",
            {"model_id": models[0], "seq_id": 4, "path": "tinker://../../etc/weights/x", "optimizer": False},
        )
        assert path_escape.status_code in (400, 404)
        assert call(client, "retrieve_future", {"request_id": "missing"}).status_code == 404


def test_old_snapshot_samplers_are_released_past_the_cap_and_finishing_a_session_frees_it(server, tiny_model_dir):
    with httpx.Client(base_url=server, headers={"X-API-Key": API_KEY}, timeout=60) as client:
        session = call(client, "create_session", {"tags": []}).json()["session_id"]
        model = call(
            client,
            "create_model",
            {"session_id": session, "model_seq_id": 0, "base_model": str(tiny_model_dir), "lora_config": {"rank": 2}},
        )
        model_id = result(client, model)["model_id"]
        samplers = [
            result(
                client,
                call(
                    client,
                    "save_weights_for_sampler",
                    {"model_id": model_id, "seq_id": seq, "sampling_session_seq_id": seq},
                ),
            )["sampling_session_id"]
            for seq in range(1, 11)
        ]
        assert client.get(f"/api/v1/samplers/{samplers[0]}").status_code == 404  # the cap is 8 snapshots per model
        assert client.get(f"/api/v1/samplers/{samplers[-1]}").json()["base_model"] == str(tiny_model_dir)
        prompt = {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]}
        sample = call(
            client,
            "asample",
            {
                "sampling_session_id": samplers[-1],
                "seq_id": 0,
                "num_samples": 2,
                "prompt": prompt,
                "sampling_params": {"max_tokens": 3, "seed": 1},
            },
        )
        assert len(result(client, sample)["sequences"]) == 2 and len(sample.json()["sample_sequence_ids"]) == 2
        assert call(client, f"sessions/{session}/finish", {"reason": {"type": "success"}}).status_code == 200
        assert call(client, "get_info", {"model_id": model_id}).status_code == 404


def test_serve_refuses_a_public_address_without_an_api_key():
    outcome = CliRunner().invoke(cli_app, ["serve", "--host", "0.0.0.0"], env={"SPARRING_API_KEY": ""})
    assert outcome.exit_code == 2 and "without an API key" in outcome.output


def test_every_spelling_of_loopback_counts_as_loopback():
    from sparring.cli import _is_loopback

    assert all(_is_loopback(host) for host in ["127.0.0.1", "127.1", "127.255.0.9", "::1", "localhost"])
    assert not any(
        _is_loopback(host) for host in ["0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "128.0.0.1", "example.com"]
    )


# Protobuf codec against the SDK's generated code -----------------------------------------------


@pytest.mark.skipif(not HAS_LATEST_SDK, reason="the tinker SDK needs Python 3.11+")
def test_protobuf_bodies_round_trip_through_the_sdks_own_codec():
    import numpy as np
    from tinker import types as tt
    from tinker.proto.request_conv import forward_backward_request_to_proto
    from tinker.proto.response_conv import deserialize_forward_backward_output, deserialize_sample_response

    from sparring.server.tinker.proto import (
        decode_forward_backward_request,
        encode_forward_backward_output,
        encode_sample_response,
    )

    data = [
        tt.Datum(
            model_input=tt.ModelInput.from_ints([3, 4, 5]),
            loss_fn_inputs={"target_tokens": [4, 5, 6], "advantages": [0.5, -1.0, 2.0], "logprobs": [-1.0, -2.0, -3.0]},
        )
    ]
    request = tt.ForwardBackwardRequest(
        forward_backward_input=tt.ForwardBackwardInput(
            data=data, loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.75}
        ),
        model_id="s:train:0",
        seq_id=7,
    )
    message = forward_backward_request_to_proto(request)
    message.forward_only = True
    decoded = decode_forward_backward_request(message.SerializeToString())
    assert (decoded["model_id"], decoded["seq_id"], decoded["forward_only"]) == ("s:train:0", 7, True)
    batch = decoded["forward_backward_input"]
    assert batch["loss_fn"] == "ppo" and batch["loss_fn_config"] == {"clip_low_threshold": 0.75}
    assert batch["data"][0]["model_input"]["chunks"][0]["tokens"] == [3, 4, 5]
    assert batch["data"][0]["loss_fn_inputs"]["target_tokens"] == {"data": [4, 5, 6], "dtype": "int64", "shape": [3]}
    assert batch["data"][0]["loss_fn_inputs"]["advantages"]["data"] == [0.5, -1.0, 2.0]

    td = sparring.types.TensorData.from_numpy
    output = sparring.types.ForwardBackwardOutput(
        "ArrayRecord",
        [{"logprobs": td(np.array([-1.5, -0.25], np.float32))}, {"logprobs": td(np.array([-3.0], np.float32))}],
        {"loss:sum": 2.5},
    )
    back = deserialize_forward_backward_output(encode_forward_backward_output(output))
    assert back.metrics == {"loss:sum": 2.5} and [o["logprobs"].tolist() for o in back.loss_fn_outputs] == [
        [-1.5, -0.25],
        [-3.0],
    ]

    sequences = [
        sparring.types.SampledSequence("length", [9, 8], [-0.5, -1.5]),
        sparring.types.SampledSequence("stop", [2], [-0.125]),
    ]
    sampled = deserialize_sample_response(
        encode_sample_response(sparring.types.SampleResponse(sequences, [None, -2.0, -0.5]))
    )
    assert [(s.stop_reason, list(s.tokens), list(s.logprobs)) for s in sampled.sequences] == [
        ("length", [9, 8], [-0.5, -1.5]),
        ("stop", [2], [-0.125]),
    ]
    assert sampled.prompt_logprobs == [None, -2.0, -0.5]


# Per-model ordering --------------------------------------------------------------------------------


def test_a_model_lane_submits_in_seq_order_and_gets_past_a_missing_request():
    async def scenario() -> list:
        order: list = []
        lane = ModelLane("m", asyncio.sleep(0.05, result="client"), gap_s=0.2)

        def op(tag):
            async def start(client):
                order.append((tag, client))
                return tag

            return start

        done = [lane.submit(3, op(3)), lane.submit(1, op(1)), lane.submit(None, op("free")), lane.submit(2, op(2))]
        assert await asyncio.gather(*done) == [3, 1, "free", 2]
        lane.skip(4)
        late = [lane.submit(6, op(6)), lane.submit(7, op(7))]  # 5 never comes: the lane waits gap_s, then goes on
        started = time.monotonic()
        await asyncio.gather(*late)
        waited = time.monotonic() - started
        lane.close()
        return [tag for tag, _ in order], waited

    order, waited = asyncio.run(scenario())
    assert order == [1, 2, 3, "free", 6, 7] and waited >= 0.15
