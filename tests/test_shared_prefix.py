"""Shared prefixes in the learner: datums that begin alike run their prefix once, with the same results.

The plan is checked on token ids alone; the learner's optimized path (shared prefix, LM head once per distinct
position) is checked against running every datum whole on the tiny model: same loss, logprobs and LoRA gradients.
"""

import random

import pytest
import torch

from sparring import types
from sparring.engine import AdapterBank
from sparring.engine.batch_plan import plan_micro_batches
from sparring.engine.learner import prepare_data, run_forward
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


def as_tensors(rows):
    return [torch.tensor(row) for row in rows]


def test_a_group_per_prompt_runs_its_prompt_once():
    rows = grpo_tokens(prompts=3, group=4)
    plan = plan_micro_batches(as_tensors(rows), token_budget=80, min_shared_prefix=8)
    assert sorted(i for batch in plan for i in batch.indices) == list(range(12))
    assert [sorted(batch.indices) for batch in plan] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert all(batch.prefix_length >= len(SYSTEM) + 6 for batch in plan)
    for batch in plan:
        prefix = rows[batch.indices[0]][: batch.prefix_length]
        assert all(rows[i][: batch.prefix_length] == prefix and len(rows[i]) > batch.prefix_length for i in batch.indices)
        assert batch.prefix_length + max(len(rows[i]) - batch.prefix_length for i in batch.indices) * len(batch.indices) <= 80


def test_a_large_budget_shares_the_common_system_prompt_and_a_small_one_cuts_groups():
    rows = grpo_tokens(prompts=3, group=4)
    (everything,) = plan_micro_batches(as_tensors(rows), token_budget=10_000, min_shared_prefix=8)
    assert everything.prefix_length == len(SYSTEM) and sorted(everything.indices) == list(range(12))
    small = plan_micro_batches(as_tensors(rows), token_budget=40, min_shared_prefix=8)
    assert sorted(i for batch in small for i in batch.indices) == list(range(12))
    assert all(batch.prefix_length + max(len(rows[i]) - batch.prefix_length for i in batch.indices) * len(batch.indices) <= 40 for batch in small if batch.prefix_length)


def test_nothing_is_shared_when_off_when_prefixes_are_short_or_a_row_would_be_empty():
    rows = grpo_tokens(prompts=2, group=3)
    assert all(batch.prefix_length == 0 for batch in plan_micro_batches(as_tensors(rows), 1000, min_shared_prefix=0))
    unrelated = [[1, 2, 3, 4, 5], [1, 2, 9, 9, 9], [7, 7, 7]]
    assert all(batch.prefix_length == 0 for batch in plan_micro_batches(as_tensors(unrelated), 1000, min_shared_prefix=3))
    nested = [SYSTEM, SYSTEM + [5, 6]]  # the first is all prefix: the shared part stops one token short of it
    (batch,) = plan_micro_batches(as_tensors(nested), 1000, min_shared_prefix=8)
    assert batch.prefix_length == len(SYSTEM) - 1


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
        types.Datum(model_input=types.ModelInput.from_ints(row[:-1]), loss_fn_inputs={"target_tokens": row[1:], "weights": [rng.uniform(0, 1) for _ in row[1:]]})
        for row in rows
    ]


def run(bank, data, loss_fn, min_shared_prefix, token_budget):
    for parameter in bank.parameters("policy"):
        parameter.grad = None
    with bank.use("policy"):
        output = run_forward(bank.base_model, prepare_data(data, loss_fn, 512), loss_fn, {}, backward=True, token_budget=token_budget, min_shared_prefix=min_shared_prefix)
    gradients = [parameter.grad.clone() for parameter in bank.parameters("policy")]
    return output, gradients


@pytest.mark.parametrize("loss_fn, make_data", [("ppo", policy_data), ("cross_entropy", weighted_data), ("dro", policy_data)])
@pytest.mark.parametrize("token_budget", [40, 1024])
def test_shared_prefixes_give_the_same_loss_logprobs_and_gradients(bank, loss_fn, make_data, token_budget):
    rows = grpo_tokens(prompts=3, group=4, seed=token_budget) + [SYSTEM + [7, 8, 9], list(range(50, 58))]
    data = make_data(rows)
    whole, whole_gradients = run(bank, data, loss_fn, min_shared_prefix=0, token_budget=token_budget)
    shared, shared_gradients = run(bank, data, loss_fn, min_shared_prefix=8, token_budget=token_budget)
    assert shared.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-5)
    for ours, reference in zip(shared.loss_fn_outputs, whole.loss_fn_outputs):
        torch.testing.assert_close(ours["logprobs"].to_torch(), reference["logprobs"].to_torch(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours["elementwise_loss"].to_torch(), reference["elementwise_loss"].to_torch(), rtol=1e-5, atol=1e-5)
    assert any(gradient.abs().sum() > 0 for gradient in whole_gradients)
    for ours, reference in zip(shared_gradients, whole_gradients):  # float32 sums in another order: 1e-4 of the largest entry
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4 * float(reference.abs().max()))
