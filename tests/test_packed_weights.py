"""Sampling through oneDNN-packed weights with the adapter folded in (engine/packed_weights.py) against merging it,
and the learner's packed copies of frozen weights."""

import gc
import shutil
import weakref

import pytest
import torch

from sparring import EngineConfig, ServiceClient, types
from sparring.engine.packed_weights import ProjectionWeights, packed, packed_frozen, packed_matmul

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


def datum(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


@pytest.mark.parametrize("train_unembed", [False, True], ids=["attn+mlp", "with-tied-head"])
def test_sampling_folds_the_adapter_into_packed_copies_and_never_writes_the_base_weights(
    tiny_model_dir, tmp_path, train_unembed
):
    def client(pack: bool):
        path = shutil.copytree(tiny_model_dir, tmp_path / f"pack-{pack}")  # an engine of its own per setting
        service = ServiceClient(
            base_dir=tmp_path / f"checkpoints-{pack}", engine_config=EngineConfig(pack_cpu_weights=pack)
        )
        return service.create_lora_training_client(str(path), rank=4, seed=3, train_unembed=train_unembed)

    packed_client, merged_client = client(True), client(False)
    renderer = packed_client.get_renderer()
    prompt = renderer.render([{"role": "user", "content": "what is two plus two?"}])
    params = types.SamplingParams(max_tokens=8, temperature=1.0, stop=[], seed=5)
    base = packed_client.engine.bank.base_model.get_decoder().layers[0].self_attn.q_proj.get_base_layer().weight
    base_before, version_before = base.detach().clone(), base._version

    def sample(training_client) -> list[tuple[int, float]]:
        sampler = training_client.save_weights_and_get_sampling_client(kind="inflight")
        sequence = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result(timeout=60).sequences[0]
        return list(zip(sequence.tokens, sequence.logprobs, strict=True))

    for _ in range(3):  # every optimizer step changes the LoRA matrices: the packed copies must follow
        outputs = []
        for training_client in (packed_client, merged_client):
            training_client.forward_backward([datum(prompt + [40, 41, 42])], "cross_entropy").result(timeout=60)
            training_client.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
            outputs.append(sample(training_client))
        folded, merged = outputs
        assert [token for token, _ in folded] == [token for token, _ in merged]
        torch.testing.assert_close([lp for _, lp in folded], [lp for _, lp in merged], rtol=0, atol=1e-4)
    # The plain path merges, except into a head tied to the embeddings (peft's module runs it unmerged instead).
    assert packed_client.engine.bank.merged_adapter is None
    assert merged_client.engine.bank.merged_adapter == (None if train_unembed else merged_client.adapter)
    assert base._version == version_before and torch.equal(base, base_before)


def test_the_packed_copies_of_the_last_three_adapter_sets_sampled_are_kept(tiny_model_dir, tmp_path):
    path = shutil.copytree(tiny_model_dir, tmp_path / "three-sets")
    service = ServiceClient(base_dir=tmp_path / "checkpoints")
    clients = [service.create_lora_training_client(str(path), rank=4, seed=seed) for seed in range(3)]
    engine = clients[0].engine
    layer = engine.bank.base_model.get_decoder().layers[0].mlp.down_proj

    def copy_for(adapter: str | None) -> torch.Tensor:
        def pack() -> torch.Tensor:
            with engine.bank.use(adapter):
                return packed([ProjectionWeights.of(layer)])

        return engine.call(pack).result(timeout=60)

    policy, opponent, other = (client.adapter for client in clients)
    first = {name: copy_for(name) for name in (policy, opponent, None)}
    assert len({id(copy) for copy in first.values()}) == 3
    assert all(copy_for(name) is first[name] for name in (policy, opponent, None))  # taking turns packs nothing again
    copy_for(other)  # a fourth set: the least recently used copy (the policy's) goes
    assert copy_for(opponent) is first[opponent] and copy_for(policy) is not first[policy]


def test_the_learners_packed_copy_of_a_frozen_weight_follows_its_writes_and_dies_with_it():
    torch.manual_seed(0)
    weight, x, grad = torch.randn(24, 16), torch.randn(5, 16), torch.randn(5, 24)
    forward, backward = packed_frozen(weight), packed_frozen(weight, transposed=True)
    torch.testing.assert_close(packed_matmul(x, forward), x @ weight.t())
    torch.testing.assert_close(packed_matmul(grad, backward), grad @ weight)
    assert packed_frozen(weight) is forward and packed_frozen(weight, transposed=True) is backward  # made once
    with torch.no_grad():
        weight.mul_(2.0)  # written in place (an adapter merged into it): packed again
    torch.testing.assert_close(packed_matmul(x, packed_frozen(weight)), x @ weight.t())
    weight.data = torch.randn(24, 16)  # new `.data` (another storage): packed again
    torch.testing.assert_close(packed_matmul(grad, packed_frozen(weight, transposed=True)), grad @ weight)
    copy = weakref.ref(packed_frozen(weight))
    del weight
    gc.collect()
    assert copy() is None  # the copy goes with its weight
