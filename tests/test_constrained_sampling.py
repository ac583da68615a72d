"""Constrained sampling on the tiny model: only valid tokens, and the learner renormalises exactly as the sampler did.

The engine samples under `choices`, a regex or a JSON schema; every sampled token must lie in the allowed set it
recorded, every completion must be one of the choices (a property test over random choice lists), and the
learner's log-probability of each constrained token — computed from the recorded allowed sets in a datum — must
equal the sampler's within 1e-5 (the importance ratio of the unchanged policy is 1). Unconstrained rows sampled in
the same batch as constrained ones sample the tokens they sample alone.
"""

import asyncio
import json
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparring import ServiceClient
from sparring.engine.allowed_tokens import allowed_masks, encode_allowed, flatten_allowed, is_allowed
from sparring.engine.learner import DatumError
from sparring.types import Datum, ModelInput, OutputConstraint, SamplingParams

PLAYERS = ["Player1", "Player2", "Player10", "nobody"]


@pytest.fixture(scope="module")
def client(tiny_model_dir, tmp_path_factory):
    service = ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt"))
    return service.create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)


@pytest.fixture(scope="module")
def sampler(client):
    return client.save_weights_and_get_sampling_client(kind="inflight")


@pytest.fixture(scope="module")
def prompt(sampler):
    return sampler.get_renderer().render([{"role": "user", "content": "Who is the werewolf?"}])


def sample(sampler, prompt, n=8, **params):
    return sampler.sample(ModelInput.from_ints(prompt), n, SamplingParams(**params)).result().sequences


def text_of(sampler, tokens):
    return sampler.get_renderer().parse_response(tokens, tool_calls=False)["content"]


def learner_logprobs(client, prompt, sequence, use_allowed=True):
    """The learner's logprobs of the sequence's sampled tokens (a forward pass on the datum the trainer would build)."""
    tokens = prompt + sequence.tokens
    inputs = {"target_tokens": tokens[1:], "weights": [0.0] * (len(tokens) - 1)}
    if use_allowed:
        counts, allowed = flatten_allowed([[] for _ in prompt[1:]] + sequence.allowed_tokens)
        inputs |= {"allowed_counts": counts, "allowed_tokens": allowed}
    out = client.forward(
        [Datum(model_input=ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)], "cross_entropy"
    ).result()
    return out.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt) - 1 :]


def test_choices_sample_only_valid_replies_with_exact_learner_logprobs(client, sampler, prompt):
    sequences = sample(sampler, prompt, n=16, seed=3, temperature=1.5, constraint=OutputConstraint(choices=PLAYERS))
    assert {text_of(sampler, s.tokens) for s in sequences} <= set(PLAYERS)
    assert len({text_of(sampler, s.tokens) for s in sequences}) > 1, (
        "temperature 1.5 over 16 samples should reach several choices"
    )
    for sequence in sequences:
        assert sequence.stop_reason == "stop" and sequence.tokens[-1] in sampler.get_renderer().stop_token_ids
        assert len(sequence.allowed_tokens) == len(sequence.tokens)
        assert all(
            is_allowed(allowed, token) for allowed, token in zip(sequence.allowed_tokens, sequence.tokens, strict=True)
        )
        learner = learner_logprobs(client, prompt, sequence)
        assert learner == pytest.approx(sequence.logprobs, abs=1e-5)
        # The first token is a real choice (several allowed): ignoring the mask gives another logprob.
        assert learner_logprobs(client, prompt, sequence, use_allowed=False)[0] < sequence.logprobs[0] - 0.1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    choices=st.lists(st.text(alphabet="abcXYZ 0123!é", min_size=1, max_size=6), min_size=1, max_size=6, unique=True),
    seed=st.integers(0, 2**16),
    temperature=st.sampled_from([0.0, 0.7, 1.0, 3.0]),
)
def test_no_invalid_token_is_ever_sampled(sampler, prompt, choices, seed, temperature):
    tokenizer = sampler.get_tokenizer()
    valid = {tuple(tokenizer.encode(choice, add_special_tokens=False)) for choice in choices}
    for sequence in sample(
        sampler, prompt, n=4, seed=seed, temperature=temperature, constraint=OutputConstraint(choices=choices)
    ):
        assert sequence.stop_reason == "stop"
        assert tuple(sequence.tokens[:-1]) in valid and sequence.tokens[-1] in sampler.get_renderer().stop_token_ids
        assert all(
            is_allowed(allowed, token) for allowed, token in zip(sequence.allowed_tokens, sequence.tokens, strict=True)
        )
        assert all(math.isfinite(logprob) and logprob <= 0 for logprob in sequence.logprobs)


def test_unconstrained_rows_sample_the_same_tokens_beside_constrained_ones(sampler, prompt):
    alone = sampler.sample(ModelInput.from_ints(prompt), 4, SamplingParams(seed=11, max_tokens=12))
    beside = [
        sampler.sample(ModelInput.from_ints(prompt), 4, SamplingParams(seed=11, max_tokens=12)),
        sampler.sample(
            ModelInput.from_ints(prompt), 4, SamplingParams(seed=5, constraint=OutputConstraint(choices=PLAYERS))
        ),
    ]
    alone_sequences = alone.result().sequences
    batched_sequences, constrained = beside[0].result().sequences, beside[1].result().sequences
    assert [(s.tokens, s.allowed_tokens) for s in batched_sequences] == [(s.tokens, None) for s in alone_sequences]
    for batched, single in zip(
        batched_sequences, alone_sequences, strict=True
    ):  # another batch shape rounds matmuls differently
        assert batched.logprobs == pytest.approx(single.logprobs, abs=1e-5)
    assert all(text_of(sampler, s.tokens) in PLAYERS for s in constrained)


def test_regex_and_json_schema_constrain_to_their_grammar(client, sampler, prompt):
    for sequence in sample(sampler, prompt, n=4, seed=2, constraint=OutputConstraint(regex=r"(yes|no), [0-9]{1,2}")):
        reply = text_of(sampler, sequence.tokens)
        assert sequence.stop_reason == "stop", reply
        word, number = reply.split(", ")
        assert word in ("yes", "no") and number.isdigit() and len(number) <= 2
        assert learner_logprobs(client, prompt, sequence) == pytest.approx(sequence.logprobs, abs=1e-5)
    schema = {
        "type": "object",
        "properties": {"vote": {"enum": PLAYERS}, "sure": {"type": "boolean"}},
        "required": ["vote", "sure"],
        "additionalProperties": False,
    }
    for sequence in sample(
        sampler, prompt, n=4, seed=2, max_tokens=64, constraint=OutputConstraint(json_schema=schema)
    ):
        reply = json.loads(text_of(sampler, sequence.tokens))
        assert set(reply) == {"vote", "sure"} and reply["vote"] in PLAYERS and isinstance(reply["sure"], bool)
        assert learner_logprobs(client, prompt, sequence) == pytest.approx(sequence.logprobs, abs=1e-5)


def test_greedy_constrained_reply_is_the_most_likely_valid_one(sampler, prompt):
    (greedy,) = sample(sampler, prompt, n=1, temperature=0.0, constraint=OutputConstraint(choices=PLAYERS))
    first_tokens = {sampler.get_tokenizer().encode(choice, add_special_tokens=False)[0] for choice in PLAYERS}
    assert len(first_tokens) > 1
    unmasked = {
        token: sampler.compute_logprobs(ModelInput.from_ints([*prompt, token])).result()[-1] for token in first_tokens
    }
    assert greedy.tokens[0] == max(unmasked, key=unmasked.get)


def test_bad_constraints_and_datums_are_refused_by_name(client, sampler, prompt):
    with pytest.raises(ValueError, match="exactly one of choices, regex, json_schema"):
        OutputConstraint(choices=["a"], regex="a")
    with pytest.raises(ValueError, match="non-empty"):
        OutputConstraint(choices=[])
    with pytest.raises(ValueError, match="max_tokens"):
        sample(sampler, prompt, max_tokens=2, constraint=OutputConstraint(choices=PLAYERS))
    with pytest.raises(ValueError, match="does not compile"):
        sample(sampler, prompt, constraint=OutputConstraint(regex="(unclosed"))
    tokens = prompt[:6]
    datum = Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "weights": [1.0] * 5,
            "allowed_counts": [0, 0, 0, 0, 1],
            "allowed_tokens": [tokens[-1] + 1],
        },
    )
    with pytest.raises(DatumError, match=r"datum 0: target_tokens at positions \[4\] are not in their allowed sets"):
        client.forward([datum], "cross_entropy").result()
    half = Datum(
        model_input=datum.model_input,
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * 5, "allowed_counts": [0] * 5},
    )
    with pytest.raises(DatumError, match="go together"):
        client.forward([half], "cross_entropy").result()


def test_allowed_sets_encode_the_shorter_side_and_round_trip():
    vocab = 10
    few = torch.zeros(vocab, dtype=torch.bool)
    few[[2, 7]] = True
    most = ~few
    assert encode_allowed(few) == [2, 7]
    assert encode_allowed(most) == [~2, ~7]
    assert torch.equal(allowed_masks([encode_allowed(few), encode_allowed(most)], vocab), torch.stack([few, most]))
    assert is_allowed([~2, ~7], 3) and not is_allowed([~2, ~7], 7) and is_allowed([], 5)


def test_a_closing_text_follows_the_grammar_exactly(client, sampler, prompt):
    closing = "}\n</tool_call>"
    schema = {
        "type": "object",
        "properties": {"vote": {"enum": PLAYERS}},
        "required": ["vote"],
        "additionalProperties": False,
    }
    for constraint, parse in (
        (OutputConstraint(json_schema=schema, closing=closing), json.loads),
        (OutputConstraint(regex="(yes|no)", closing=closing), str),
    ):
        for sequence in sample(sampler, prompt, n=4, seed=3, max_tokens=64, constraint=constraint):
            reply = text_of(sampler, sequence.tokens)
            assert sequence.stop_reason == "stop" and reply.endswith(closing), reply
            parse(reply[: -len(closing)])
            assert learner_logprobs(client, prompt, sequence) == pytest.approx(sequence.logprobs, abs=1e-5)
    with pytest.raises(ValueError, match="closing goes with regex or json_schema"):
        OutputConstraint(choices=["a"], closing="b")


def test_a_forced_tool_call_holds_its_arguments_to_the_schema_strict_or_not(sampler):
    from sparring.rollout import FrozenChatModel, ToolChoice

    schema = {
        "type": "object",
        "properties": {"vote": {"enum": PLAYERS}, "sure": {"type": "boolean"}},
        "required": ["vote", "sure"],
        "additionalProperties": False,
    }
    model = FrozenChatModel(sampler, defaults={"max_tokens": 48})
    messages = [{"role": "user", "content": "Who is the werewolf?"}]
    other = {
        "type": "function",
        "function": {"name": "pass", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    }

    def calls(strict: bool, tool_choice, extra: list) -> list[dict]:
        tools = [
            {
                "type": "function",
                "function": {"name": "vote", "parameters": schema, **({"strict": True} if strict else {})},
            },
            *extra,
        ]
        replies = [asyncio.run(model(messages, tools, tool_choice=tool_choice, seed=seed)) for seed in range(6)]
        return [reply.tool_calls[0]["function"] for reply in replies]

    named = {"type": "function", "function": {"name": "vote"}}
    for strict, tool_choice, extra in ((True, "required", []), (False, "required", []), (False, named, [other])):
        for call in calls(strict, tool_choice, extra):  # LangChain's bind_tools sends no strict: held all the same
            parsed = json.loads(call["arguments"])
            assert (
                call["name"] == "vote"
                and set(parsed) == {"vote", "sure"}
                and parsed["vote"] in PLAYERS
                and isinstance(parsed["sure"], bool)
            )
    for call in calls(False, "required", [other]):  # several tools: a whole call of one of them
        assert call["name"] in ("vote", "pass") and (call["name"] == "pass" or _is_valid_vote(call["arguments"]))
    tools = [{"type": "function", "function": {"name": "vote", "parameters": schema}}]
    assert (
        ToolChoice.of("auto", tools).arguments_schema is None and ToolChoice.of(None, tools).arguments_schema is None
    )  # auto stays free
    with pytest.raises(ValueError, match="needs a parameters schema"):
        asyncio.run(
            model(
                messages, [{"type": "function", "function": {"name": "vote", "strict": True}}], tool_choice="required"
            )
        )


def test_a_model_that_cannot_constrain_samples_a_non_strict_forced_call_freely(sampler):
    from sparring.rollout import FrozenChatModel

    class Unconstrained:
        """A sampler like a remote Tinker backend's: it refuses constraints."""

        constrains_output = False

        def get_renderer(self):
            return sampler.get_renderer()

        async def sample(self, prompt, n, params):
            if params.constraint is not None:
                raise ValueError("this backend cannot constrain")
            return await sampler.sample(prompt, n, params)

    model = FrozenChatModel(Unconstrained(), defaults={"max_tokens": 8})
    tool = {"type": "function", "function": {"name": "vote", "parameters": {"type": "object"}}}
    reply = asyncio.run(model([{"role": "user", "content": "Vote."}], [tool], tool_choice="required"))
    assert reply.tool_calls[0]["function"]["name"] == "vote"
    with pytest.raises(ValueError, match="cannot constrain"):
        asyncio.run(
            model(
                [{"role": "user", "content": "Vote."}],
                [{**tool, "function": {**tool["function"], "strict": True}}],
                tool_choice="required",
            )
        )


def _is_valid_vote(text: str) -> bool:
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("vote") in PLAYERS
