"""`sparring serve` under abuse: every request bounded, every client isolated.

A real server process on a tiny model with a 4,096-token context (so a long
decode takes seconds, not minutes) is sent what an attacker or a careless
client would send: a billion `max_tokens`, a datum longer than the context,
a batch over the token limit, absurd LoRA ranks and names, `tinker://`
paths that climb out of `--base-dir`, adapter directories named as OpenAI
`model`s, guessed ids of another session's models, futures and checkpoints,
a cancel of running sampling, a client that hangs up, and malformed bodies on
every route of `/openapi.json`. Every answer must be a 4xx JSON naming the
problem (or the right result), none a 5xx, none slower than `BOUND_S`; the
counts are checked last. Schemathesis runs against `/openapi.json` when it is
installed: no 5xx, and no status the schema does not list. A server's own
limits and its shutdown (an abandoned client, a body over the limit, SIGTERM):
tests/test_server_lifecycle.py.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import httpx
import pytest
from abuse_client import API_KEY, BOUND_S, CONTEXT, LONG, MAX_REQUEST_TOKENS, Abuser, build_long_model, datum, refused
from sparring_server import serving

import sparring

if importlib.util.find_spec("schemathesis") is not None:
    # Imported at collection, before any test starts a thread: CPython 3.11 keeps the AST constructor's recursion
    # counter in state that threads share (python/cpython#106905), so pytest rewriting schemathesis's modules inside
    # the test, beside the server's threads, failed once with "AST constructor recursion depth mismatch".
    import schemathesis.specs.openapi.checks  # noqa: F401
    import schemathesis.specs.openapi.schemas  # noqa: F401


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory) -> Path:
    """The tiny model with a 4,096-token context."""
    return build_long_model(tmp_path_factory.mktemp("tiny-long"))


@pytest.fixture(scope="module")
def named_adapter(long_model_dir, tmp_path_factory) -> Path:
    """A PEFT adapter saved in process, for `serve --adapter named=PATH`."""
    service = sparring.ServiceClient(base_dir=tmp_path_factory.mktemp("adapter"))
    training = service.create_lora_training_client(str(long_model_dir), rank=2, seed=0)
    return Path(training.save_weights_for_sampler("named").result().path)


@pytest.fixture(scope="module")
def served(long_model_dir, named_adapter, tmp_path_factory):
    directory = tmp_path_factory.mktemp("abuse")
    # Where `tinker://../weights/outside` pointed before paths were confined: it must stay unreachable.
    outside = directory / "weights" / "outside"
    outside.mkdir(parents=True)
    (outside / "adapter_config.json").write_text((named_adapter / "adapter_config.json").read_text())
    options = ("--adapter", f"named={named_adapter}", "--max-request-tokens", str(MAX_REQUEST_TOKENS), "--drain-s", "2")
    with serving(long_model_dir, directory, API_KEY, extra_args=options) as server:
        yield server


@pytest.fixture(scope="module")
def abuser(served) -> Abuser:
    return Abuser(served.url)


# Bounds ----------------------------------------------------------------------------------------------


def test_sampling_beyond_the_context_or_the_limits_is_refused_naming_the_field(abuser, long_model_dir):
    sampler = abuser.sampler(abuser.session(), base_model=str(long_model_dir))
    refused(
        abuser.sample(sampler, [5, 6, 7], max_tokens=1_000_000_000), 400, "sampling_params.max_tokens", str(CONTEXT)
    )
    refused(
        abuser.sample(sampler, [5] * (CONTEXT - 10), max_tokens=100),
        400,
        "sampling_params.max_tokens",
        "prompt",
        str(CONTEXT),
    )
    refused(abuser.sample(sampler, [5] * (CONTEXT + 1)), 400, "context")
    refused(abuser.sample(sampler, [5, 6, 7], num_samples=100_000, max_tokens=1), 400, "num_samples", "64")
    refused(
        abuser.sample(sampler, [5, 6, 7], num_samples=60, max_tokens=4000), 400, "num_samples", str(MAX_REQUEST_TOKENS)
    )
    refused(abuser.sample(sampler, [5, 6, 7], max_tokens=1, stop=["x"] * 1000), 400, "stop")
    refused(abuser.sample(sampler, [5, 6, 7], max_tokens=0), 400, "max_tokens")
    out_of_vocabulary = abuser.result(abuser.sample(sampler, [999_999], max_tokens=1))
    assert out_of_vocabulary["category"] == "user" and "vocabulary" in out_of_vocabulary["error"]
    sampled = abuser.result(abuser.sample(sampler, [5, 6, 7], max_tokens=3, seed=1))
    assert len(sampled["sequences"][0]["tokens"]) <= 3


def test_training_requests_beyond_the_context_or_the_limits_are_refused_and_the_model_goes_on(abuser, long_model_dir):
    session = abuser.session()
    huge_rank = abuser.tinker(
        "create_model",
        {"session_id": session, "model_seq_id": 0, "base_model": str(long_model_dir), "lora_config": {"rank": 100_000}},
    )
    refused(huge_rank, 400, "lora_config.rank", "256")
    refused(
        abuser.tinker(
            "create_model",
            {"session_id": session, "model_seq_id": 0, "base_model": str(long_model_dir), "lora_config": {"rank": 0}},
        ),
        400,
        "rank",
    )
    refused(abuser.tinker("create_session", {"tags": ["x" * 10_000]}), 400, "tags.0")
    refused(abuser.tinker("session_heartbeat", {"session_id": "s" * 100_000}), 400, "session_id")
    model = abuser.model(session, str(long_model_dir), seq=1)

    def fb(seq: int, data: list[dict]) -> httpx.Response:
        return abuser.tinker(
            "forward_backward",
            {"model_id": model, "seq_id": seq, "forward_backward_input": {"data": data, "loss_fn": "cross_entropy"}},
        )

    refused(fb(1, [datum(8), datum(CONTEXT + 500)]), 400, "forward_backward_input.data[1].model_input", str(CONTEXT))
    refused(fb(2, [datum(4000)] * 30), 400, "forward_backward_input.data", str(MAX_REQUEST_TOKENS))
    for seq, name in ((3, "../escape"), (4, "x" * 300), (5, ".hidden")):
        refused(abuser.tinker("save_weights", {"model_id": model, "seq_id": seq, "path": name}), 400, "path")
    # Each refused request gave up its seq_id: the next one runs at once, on a model that still trains.
    started = time.monotonic()
    assert abuser.result(fb(6, [datum(16)]))["metrics"]["loss:sum"] > 0
    assert time.monotonic() - started < BOUND_S / 2


def test_a_cancelled_sampling_request_stops_and_frees_the_engine(abuser, long_model_dir):
    sampler = abuser.sampler(abuser.session(), base_model=str(long_model_dir))
    running = abuser.sample(sampler, [5, 6, 7], num_samples=16, **LONG)
    time.sleep(1.0)  # decoding by now
    assert abuser.tinker("cancel_future", {"request_id": running.json()["request_id"]}).status_code == 200
    assert "cancelled" in abuser.result(running)["error"]
    started = time.monotonic()
    abuser.result(abuser.sample(sampler, [5, 6, 7], max_tokens=2, stop=[]))
    assert time.monotonic() - started < 5.0, "the engine went on decoding the cancelled request"
    refused(abuser.tinker("cancel_future", {"request_id": "req-guessed"}), 404, "req-guessed")


def test_a_chat_completion_whose_client_hung_up_is_not_computed(served, abuser):
    # The one allowed reply is thousands of tokens long, so no early end-of-text makes the work finish inside the
    # client's half second on a fast machine (it did on CI when the reply length was left to chance).
    forced_reply = " ".join(["hello world"] * 560)
    with pytest.raises(httpx.TimeoutException):
        Abuser.sent += 1
        httpx.post(
            f"{served.url}/v1/chat/completions",
            json={
                "model": "named",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": CONTEXT - 64,
                "n": 16,
                "seed": 0,
                "guided_choice": [forced_reply],
            },
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=0.5,  # the whole reply takes 7 s on the 2-core CPU
        )
    deadline = time.monotonic() + 10
    while "client left before its reply was sampled" not in served.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "client left before its reply was sampled" in served.log.read_text()


# Isolation ---------------------------------------------------------------------------------------


def test_a_second_session_cannot_reach_the_first_ones_models_futures_or_weights(served, abuser, long_model_dir):
    first = abuser.session()
    model = abuser.model(first, str(long_model_dir))
    saved = abuser.result(abuser.tinker("save_weights_for_sampler", {"model_id": model, "seq_id": 1, "path": "mine"}))[
        "path"
    ]
    state = abuser.result(abuser.tinker("save_weights", {"model_id": model, "seq_id": 2, "path": "mine"}))["path"]
    sampler = abuser.sampler(first, base_model=str(long_model_dir))
    request_id = abuser.sample(sampler, [5, 6], max_tokens=2).json()["request_id"]
    # A model id embeds its session's (the SDK builds it so); no path, sampler or request id reveals either.
    assert model.startswith(first)
    for handed in (saved, state, sampler, request_id):
        assert first not in handed and model not in handed

    second = abuser.session()
    own_model = abuser.model(second, str(long_model_dir))
    own_request = abuser.tinker(
        "forward",
        {"model_id": own_model, "seq_id": 1, "forward_input": {"data": [datum(4)], "loss_fn": "cross_entropy"}},
    ).json()["request_id"]
    guesses = {
        "model_id": [
            f"{second}:train:7",
            own_model.replace(second, "0" * 32),
            own_model.replace(second, second[::-1]),
            "x:train:0",
        ],
        "request_id": [own_request[:-1] + ("0" if own_request[-1] != "0" else "1"), "req-0", "req-1"],
    }
    for guess in guesses["model_id"]:
        refused(
            abuser.tinker("optim_step", {"model_id": guess, "seq_id": 1, "adam_params": {"learning_rate": 0.5}}),
            404,
            "model_id",
        )
        refused(abuser.tinker("get_info", {"model_id": guess}), 404, "model_id")
    for guess in guesses["request_id"]:
        refused(abuser.tinker("retrieve_future", {"request_id": guess}), 404, "request_id")
        refused(abuser.tinker("cancel_future", {"request_id": guess}), 404, "request_id")
    # The second session saving under the first one's names writes its own checkpoints, never the first one's.
    files_before = {path: path.read_bytes() for path in served.base_dir.rglob("*") if path.is_file()}
    overwritten = abuser.result(
        abuser.tinker("save_weights_for_sampler", {"model_id": own_model, "seq_id": 2, "path": "mine"})
    )["path"]
    assert overwritten != saved
    assert all(path.read_bytes() == content for path, content in files_before.items())
    # The first session's end releases its models and cancels its unfinished requests.
    running = abuser.sample(sampler, [5, 6, 7], num_samples=16, **LONG)
    assert abuser.tinker(f"sessions/{first}/finish", {"reason": {"type": "success"}}).status_code == 200
    assert "cancelled" in abuser.result(running)["error"]
    refused(abuser.tinker("get_info", {"model_id": model}), 404, "model_id")
    refused(abuser.tinker("session_heartbeat", {"session_id": first}), 404, "session_id")


@pytest.mark.parametrize(
    "path",
    [
        "tinker://../weights/outside",
        "tinker://../../weights/outside",
        "tinker://./weights/outside",
        "tinker://x/weights/../../../weights/outside",
        "tinker://x/weights/..",
        "tinker:///etc/passwd",
        "/etc",
        "../weights/outside",
        "tinker://%2e%2e/weights/outside",
        "tinker://" + "a" * 2000 + "/weights/x",
    ],
)
def test_checkpoint_paths_are_confined_to_the_base_dir(abuser, long_model_dir, path):
    session = abuser.session()
    model = abuser.model(session, str(long_model_dir))
    for answer in (
        abuser.tinker(
            "create_sampling_session", {"session_id": session, "sampling_session_seq_id": 1, "model_path": path}
        ),
        abuser.tinker("load_weights", {"session_id": session, "model_seq_id": 1, "path": path}),
        abuser.tinker("load_weights", {"model_id": model, "seq_id": 1, "path": path}),
        abuser.tinker("weights_info", {"tinker_path": path}),
        abuser.post(
            "/v1/chat/completions", {"model": path, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        ),
    ):
        assert answer.status_code in (400, 404), answer.text


def test_the_openai_api_serves_only_base_models_named_and_saved_adapters_and_lists_no_paths(
    abuser, long_model_dir, named_adapter
):
    def chat(model: str, **options) -> httpx.Response:
        return abuser.post(
            "/v1/chat/completions",
            {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **options},
        )

    refused(chat(str(named_adapter)), 404, "not served here")
    refused(chat("/etc"), 404, "not served here")
    assert chat("named").status_code == 200
    assert chat(str(long_model_dir)).status_code == 200
    session = abuser.session()
    model = abuser.model(session, str(long_model_dir))
    saved = abuser.result(
        abuser.tinker("save_weights_for_sampler", {"model_id": model, "seq_id": 1, "path": "for-chat"})
    )["path"]
    assert chat(saved).status_code == 200
    listed = [entry["id"] for entry in abuser.request("GET", "/v1/models").json()["data"]]
    assert listed == sorted([str(long_model_dir), "named"]) and saved not in listed
    refused(chat("named", max_tokens=1_000_000_000), 400, "max_tokens", str(CONTEXT))
    refused(chat("named", max_tokens=CONTEXT - 2), 400, "max_tokens", "prompt")
    refused(chat("named", n=10_000), 400, "n")
    refused(
        abuser.post(
            "/v1/chat/completions", {"model": "named", "messages": [{"role": "user", "content": "hi " * 5000}]}
        ),
        400,
        "context",
    )


def test_every_route_answers_malformed_bodies_with_a_4xx(abuser, served):
    schema = abuser.request("GET", "/openapi.json").json()
    declared = [route for route, methods in schema["paths"].items() if "requestBody" in methods.get("post", {})]
    assert (
        "/api/v1/asample" in declared and "/v1/chat/completions" in declared and len(declared) >= 18
    )  # for schemathesis
    bodies = [
        None,
        [],
        "x",
        0,
        {},
        {"model_id": None},
        {"session_id": 5, "model_id": [], "request_id": {}},
        {"model_id": [], "seq_id": 1},
        {"model_id": {}, "seq_id": 2, "path": []},
        {"x": [[[[[]]]]] * 100},
        {"sampling_params": "hot", "prompt": 1},
    ]
    sent = 0
    for route, methods in schema["paths"].items():
        if "{" in route or "post" not in methods:
            continue
        for body in bodies:
            answer = abuser.post(route, body)
            assert answer.status_code < 500, f"{route} {body!r}: {answer.status_code} {answer.text[:300]}"
            sent += 1
        raw = abuser.request("POST", route, content=b"\xff\xfe{", headers={"content-type": "application/json"})
        assert raw.status_code < 500, f"{route}: {raw.text[:300]}"
    assert sent > 100


@pytest.mark.skipif(
    importlib.util.find_spec("schemathesis") is None,
    reason="schemathesis is not installed (it is in the dev extra: pip install -e '.[dev]')",
)
def test_schemathesis_finds_no_5xx_and_no_undeclared_status_in_60_seconds(served):
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.specs.openapi.checks import status_code_conformance

    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json", headers={"X-API-Key": API_KEY})
    deadline = time.monotonic() + 60
    failures: list[str] = []
    for found in schema.get_all_operations():
        if time.monotonic() > deadline:
            break
        strategy = found.ok().as_strategy()

        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case) -> None:
            Abuser.sent += 1
            response = case.call(base_url=served.url, headers={"X-API-Key": API_KEY}, timeout=BOUND_S)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.path}: {response.status_code} {response.text[:200]}")
            try:
                case.validate_response(response, checks=[status_code_conformance])
            except Exception as error:  # noqa: BLE001 - schemathesis raises its own failure types
                failures.append(
                    f"{case.method} {case.path}: status {response.status_code} is not in /openapi.json: "
                    f"{str(error)[:200]}"
                )

        given(strategy)(check)()
    assert not failures, failures


# Counts -----------------------------------------------------------------------------------------


def test_the_abuse_got_no_5xx_and_no_hangs():
    print(f"\nabuse: {Abuser.sent} requests, {len(Abuser.server_errors)} 5xx, {len(Abuser.hangs)} hangs")
    assert Abuser.sent > 100
    assert not Abuser.server_errors, Abuser.server_errors
    assert not Abuser.hangs, Abuser.hangs
