"""Prefix trees in the learner: every prefix the datums share computed once, with the same results.

The plan is checked on token ids alone (each distinct prefix one node, within the budget, every datum position
mapped to the node of its prefix) and the chunked attention against the ancestor relation it stands for; the
learner's tree path is checked against running every datum whole on the tiny model: same loss, logprobs and LoRA
gradients.
"""

import json
import random

import pytest
import torch

from sparring import types
from sparring.engine import AdapterBank
from sparring.engine.learner import prepare_data, run_forward
from sparring.engine.prefix_tree import _tree_attention, plan_tree_batches, runs_as_trees
from sparring.models import load_base_model

SYSTEM = list(range(100, 120))


def grpo_tokens(prompts: int, group: int, seed: int = 0) -> list[list[int]]:
    """`group` completions (3 to 12 tokens) of each of `prompts` prompts, every prompt after the same system prompt."""
    rng = random.Random(seed)
    rows = []
    for prompt in range(prompts):
        question = SYSTEM + [200 + prompt] * 6
        rows += [question + [rng.randrange(300, 400) for _ in range(rng.randint(3, 12))] for _ in range(group)]
    return rows


def game_tokens(games: int, turns: int, seed: int = 0) -> list[list[int]]:
    """Multi-turn episodes of one prompt: each turn a guess from three (two tokens) and a reply, so episodes agree
    turn after turn and branch at many depths."""
    rng = random.Random(seed)
    rows = []
    for _ in range(games):
        row = list(SYSTEM)
        for _ in range(rng.randint(1, turns)):
            guess = rng.choice([301, 302, 303])
            row += [guess, 2] + [400 + guess % 7] * 5
        rows.append(row)
    return rows


def as_tensors(rows):
    return [torch.tensor(row) for row in rows]


def distinct_prefixes(rows) -> int:
    return len({tuple(row[: end + 1]) for row in rows for end in range(len(row))})


@pytest.mark.parametrize("budget", [30, 100, 10_000])
def test_every_distinct_prefix_is_one_node_and_every_position_reads_its_own(budget):
    rows = game_tokens(games=12, turns=4) + [
        SYSTEM,
        SYSTEM + [301, 2],
        game_tokens(1, 4)[0],
    ]  # nested and repeated datums
    plan = plan_tree_batches(as_tensors(rows), budget)
    assert sorted(i for batch in plan for i in batch.indices) == list(range(len(rows)))
    for batch in plan:
        members = [rows[i] for i in batch.indices]
        assert len(batch.tokens_N) == distinct_prefixes(members)
        assert len(batch.tokens_N) <= budget or len(members) == 1
        for row, nodes_N in zip(members, batch.nodes_of, strict=True):
            assert batch.tokens_N[nodes_N].tolist() == row and batch.depths_N[nodes_N].tolist() == list(range(len(row)))
            assert (nodes_N[1:] > nodes_N[:-1]).all()  # each node after its parent
        for (row_a, nodes_a), (row_b, nodes_b) in zip(
            zip(members, batch.nodes_of, strict=True), list(zip(members, batch.nodes_of, strict=True))[1:], strict=False
        ):
            common = next(
                (k for k, (x, y) in enumerate(zip(row_a, row_b, strict=False)) if x != y), min(len(row_a), len(row_b))
            )
            assert nodes_a[:common].tolist() == nodes_b[:common].tolist()  # the same prefix is the same nodes...
            assert common == min(len(row_a), len(row_b)) or nodes_a[common] != nodes_b[common]  # ...and no more
    (everything,) = plan_tree_batches(as_tensors(rows), 10_000)
    assert len(everything.tokens_N) == distinct_prefixes(rows) < sum(map(len, rows)) / 3


def test_a_lone_datum_runs_as_a_plain_sequence():
    (batch,) = plan_tree_batches(as_tensors([SYSTEM]), 8)
    assert batch.attention is None and batch.tokens_N.tolist() == SYSTEM


@pytest.mark.parametrize("chunk", [1, 4, 7, 64])
def test_chunked_attention_sees_exactly_each_nodes_ancestors(chunk):
    rows = game_tokens(games=6, turns=3, seed=1)
    (batch,) = plan_tree_batches(as_tensors(rows), 10_000)
    nodes = len(batch.tokens_N)
    ancestors = torch.zeros(nodes, nodes, dtype=torch.bool)
    for nodes_N in batch.nodes_of:
        for depth, node in enumerate(nodes_N.tolist()):
            ancestors[node, nodes_N[: depth + 1]] = True
    attention = _tree_attention(ancestors, chunk)
    seen = torch.zeros(nodes, nodes, dtype=torch.bool)
    for q in range(len(attention.keys_Q_K)):
        for c in range(chunk):
            if q * chunk + c < nodes:
                seen[q * chunk + c, attention.keys_Q_K[q][attention.sees_Q_C_K[q, c]]] = True
    assert torch.equal(seen, ancestors)
    assert attention.keys_Q_K.shape[1] < nodes or chunk >= nodes / 2  # a chunk reads far fewer keys than the trie has


def test_only_plain_full_attention_models_run_as_trees(tiny_loaded):
    config = tiny_loaded.model.config
    assert runs_as_trees(config)
    windowed = type(config).from_dict(
        {**config.to_dict(), "layer_types": ["sliding_attention"] * config.num_hidden_layers}
    )
    assert not runs_as_trees(windowed)


@pytest.fixture(scope="module")
def bank(tiny_model_dir):
    loaded = load_base_model(str(tiny_model_dir))
    bank = AdapterBank(loaded.model, "tiny")
    bank.create("policy", rank=4, target_modules=bank.target_modules(), seed=0)
    with torch.no_grad():  # lora_B starts at zero; random values make the adapter (and the gradient of lora_A) matter
        generator = torch.Generator().manual_seed(1)
        for parameter in bank.parameters("policy"):
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return bank


def policy_data(rows, seed=0):
    rng = random.Random(seed)
    data = []
    for row in rows:
        targets = len(row) - 1
        prompt = min(len(SYSTEM) + 6, targets)
        advantage = rng.choice([-1.0, 0.5, 2.0])
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(row[:-1]),
                loss_fn_inputs={
                    "target_tokens": row[1:],
                    "logprobs": [rng.uniform(-4, -1) for _ in range(targets)],
                    "advantages": [0.0] * (prompt - 1) + [advantage] * (targets - prompt + 1),
                },
            )
        )
    return data


def weighted_data(rows, seed=0):
    """Cross-entropy with a weight on every position, prompt included: shared positions carry loss and gradient."""
    rng = random.Random(seed)
    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(row[:-1]),
            loss_fn_inputs={"target_tokens": row[1:], "weights": [rng.uniform(0, 1) for _ in row[1:]]},
        )
        for row in rows
    ]


def run(bank, data, loss_fn, prefix_tree, token_budget):
    for parameter in bank.parameters("policy"):
        parameter.grad = None
    with bank.use("policy"):
        output = run_forward(
            bank.base_model,
            prepare_data(data, loss_fn, 512),
            loss_fn,
            {},
            backward=True,
            token_budget=token_budget,
            prefix_tree=prefix_tree,
        )
    gradients = [parameter.grad.clone() for parameter in bank.parameters("policy")]
    return output, gradients


@pytest.mark.parametrize(
    "loss_fn, make_data", [("ppo", policy_data), ("cross_entropy", weighted_data), ("dro", policy_data)]
)
@pytest.mark.parametrize("token_budget", [40, 1024])
def test_prefix_trees_give_the_same_loss_logprobs_and_gradients(bank, loss_fn, make_data, token_budget):
    rows = grpo_tokens(prompts=3, group=4, seed=token_budget) + game_tokens(games=16, turns=6, seed=token_budget)
    rows += [SYSTEM + [7, 8, 9], SYSTEM + [7, 8, 9], list(range(50, 58))]  # a repeated datum, one sharing nothing
    data = make_data(rows)
    whole, whole_gradients = run(bank, data, loss_fn, prefix_tree=False, token_budget=token_budget)
    shared, shared_gradients = run(bank, data, loss_fn, prefix_tree=True, token_budget=token_budget)
    if token_budget > 128:  # tries of several attention chunks
        assert (
            max(
                len(batch.tokens_N) for batch in plan_tree_batches(as_tensors([row[:-1] for row in rows]), token_budget)
            )
            > 128
        )
    assert shared.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-5)
    for ours, reference in zip(shared.loss_fn_outputs, whole.loss_fn_outputs, strict=True):
        torch.testing.assert_close(ours["logprobs"].to_torch(), reference["logprobs"].to_torch(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            ours["elementwise_loss"].to_torch(), reference["elementwise_loss"].to_torch(), rtol=1e-5, atol=1e-5
        )
    assert any(gradient.abs().sum() > 0 for gradient in whole_gradients)
    for ours, reference in zip(
        shared_gradients, whole_gradients, strict=True
    ):  # float32 sums in another order: 1e-4 of the largest entry
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4 * float(reference.abs().max()))


def test_a_recorded_step_replays_with_each_calls_advantage_on_the_tokens_it_sampled(tmp_path):
    from benchmark_scripts import load_benchmark

    recorded = load_benchmark("recorded_steps")
    lines = [
        {
            "agent": "policy",
            "model": "policy",
            "num_calls": 2,
            "tokens": [5, 6, 7, 8, 9, 10, 11],
            "loss_mask": [0, 0, 1, 1, 0, 1, 0],
            "logprobs": [0, 0, -1, -2, 0, -3, 0],
            "call_index": [-1, -1, 0, 0, -1, 1, -1],
            "advantage": [0.5, -1.0],
        },
        {
            "agent": "policy",
            "model": "policy",
            "num_calls": 1,
            "tokens": [5, 6, 7],
            "loss_mask": [0, 1, 1],
            "logprobs": [0, -1, -1],
            "call_index": [-1, 0, 0],
            "advantage": 2.0,
        },
        {
            "agent": "policy",
            "model": "policy",
            "num_calls": 1,
            "tokens": [5, 6, 7],
            "loss_mask": [0, 1, 1],
            "logprobs": [0, -1, -1],
            "call_index": [-1, 0, 0],
            "advantage": None,
        },  # not trained
    ]
    path = tmp_path / "step_0.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    first, second = recorded.recorded_datums(path)
    assert first.model_input.to_ints() == [5, 6, 7, 8, 9, 10] and first.loss_fn_inputs["target_tokens"].tolist() == [
        6,
        7,
        8,
        9,
        10,
        11,
    ]
    assert first.loss_fn_inputs["advantages"].tolist() == [0.0, 0.5, 0.5, 0.0, -1.0, 0.0]
    assert second.loss_fn_inputs["advantages"].tolist() == [2.0, 2.0]
