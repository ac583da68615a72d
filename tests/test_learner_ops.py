"""The learner's fused autograd ops against the composites they replace: LoRA layers (`lora_matmul`) and the
LM head's target logprobs (`target_logprobs`); and the sampler's packed effective weights against peft's delta."""

import random

import pytest
import torch
from peft import LoraConfig, get_peft_model

from sparring import types
from sparring.engine import AdapterBank, lora_matmul
from sparring.engine import target_logprobs as target_logprobs_module
from sparring.engine.learner import prepare_data, run_forward
from sparring.engine.lora_matmul import LoraMatmul, fused_lora
from sparring.engine.packed_weights import ProjectionWeights, packed_frozen
from sparring.engine.target_logprobs import TargetLogprobs, target_logprobs
from sparring.models import load_base_model


@pytest.fixture(scope="module")
def bank(tiny_model_dir):
    bank = AdapterBank(load_base_model(str(tiny_model_dir)).model, "tiny")
    bank.create("policy", rank=4, target_modules=bank.target_modules(), seed=0)
    with torch.no_grad():  # lora_B starts at zero; random values make the adapter (and lora_A's gradient) matter
        generator = torch.Generator().manual_seed(1)
        for parameter in bank.parameters("policy"):
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return bank


def ppo_data(seed: int = 0) -> list[types.Datum]:
    rng = random.Random(seed)
    prompt = [rng.randrange(100, 400) for _ in range(12)]
    data = []
    for _ in range(6):
        row = prompt + [rng.randrange(100, 400) for _ in range(rng.randint(3, 10))]
        advantage = rng.choice([-1.0, 0.5, 2.0])
        targets = len(row) - 1
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(row[:-1]),
                loss_fn_inputs={
                    "target_tokens": row[1:],
                    "logprobs": [rng.uniform(-4, -1) for _ in range(targets)],
                    "advantages": [0.0] * 11 + [advantage] * (targets - 11),
                },
            )
        )
    return data


def forward_backward(
    bank: AdapterBank, data: list[types.Datum], fused: bool, pack: bool = False, prefix_tree: bool = True
):
    for parameter in bank.parameters("policy"):
        parameter.grad = None
    with bank.use("policy"):
        output = run_forward(
            bank.base_model,
            prepare_data(data, "ppo", 512),
            "ppo",
            {},
            backward=True,
            token_budget=1024,
            prefix_tree=prefix_tree,
            fused=fused,
            pack_weights=pack,
        )
    return output, [parameter.grad.clone() for parameter in bank.parameters("policy")]


@pytest.mark.parametrize(
    "pack",
    [False, pytest.param(True, marks=pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN"))],
    ids=["mkl", "packed"],
)
def test_the_fused_ops_give_the_composites_logprobs_and_gradients(bank, pack, monkeypatch):
    data = ppo_data()
    packs = []  # (module, transposed) of every packed weight the fused ops ask for
    for module in (lora_matmul, target_logprobs_module):
        monkeypatch.setattr(
            module,
            "packed_frozen",
            lambda weight, transposed=False, _m=module.__name__: (
                packs.append((_m, transposed)) or packed_frozen(weight, transposed)
            ),
        )
    calls, originals = [], {op: vars(op)["forward"] for op in (LoraMatmul, TargetLogprobs)}
    for op in originals:  # count the fused ops' forwards: the fused run must use both
        op.forward = staticmethod(
            lambda ctx, *args, _op=op, _forward=op.forward: calls.append(_op) or _forward(ctx, *args)
        )
    try:
        fused, fused_gradients = forward_backward(bank, data, fused=True, pack=pack)
        assert LoraMatmul in calls and TargetLogprobs in calls
        # packed: forward (W) and backward (W^T) matmuls of the LoRA layers and the head, and nothing packed otherwise
        assert set(packs) == (
            {(m.__name__, t) for m in (lora_matmul, target_logprobs_module) for t in (False, True)} if pack else set()
        )
        calls.clear()
        composite, composite_gradients = forward_backward(bank, data, fused=False)
        assert calls == []
    finally:  # the staticmethods themselves back (monkeypatch would put back the bare functions)
        for op, forward in originals.items():
            op.forward = forward
    assert fused.loss == pytest.approx(composite.loss, rel=1e-5)
    for ours, reference in zip(fused.loss_fn_outputs, composite.loss_fn_outputs, strict=True):
        torch.testing.assert_close(ours["logprobs"].to_torch(), reference["logprobs"].to_torch(), rtol=1e-5, atol=1e-5)
    assert len(fused_gradients) == len(composite_gradients) and all(
        gradient.abs().sum() > 0 for gradient in composite_gradients
    )
    for ours, reference in zip(fused_gradients, composite_gradients, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-5 * float(reference.abs().max()))


def test_fused_lora_routes_plain_frozen_lora_layers_only_and_restores_them():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 4, bias=False))
    model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["0", "1", "2"], lora_dropout=0.0))
    layers = [model.base_model.model[i] for i in range(3)]
    layers[1].lora_dropout["default"] = torch.nn.Dropout(0.5)  # dropout: peft's forward
    layers[2].base_layer.weight.requires_grad_(True)  # a trained base weight: peft's forward
    with torch.no_grad():
        for layer in layers:
            layer.lora_B["default"].weight.normal_()
    x = torch.randn(3, 5, 8)
    reference = model.eval()(x)
    with fused_lora(model):
        assert ["forward" in vars(layer) for layer in layers] == [True, False, False]
        torch.testing.assert_close(model(x), reference)
    assert not any("forward" in vars(layer) for layer in layers)


def test_lora_matmul_matches_peft_with_two_adapters_a_bias_and_input_gradients():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    weight, bias = torch.randn(5, 6, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    lora = [torch.randn(shape, dtype=torch.float64, requires_grad=True) for shape in ((2, 6), (5, 2), (3, 6), (5, 3))]
    scalings = (0.5, 2.0)
    torch.autograd.gradcheck(lambda x, *lora: LoraMatmul.apply(x, weight, bias, False, scalings, *lora), (x, *lora))


def test_target_logprobs_match_log_softmax_through_repeated_backwards():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False).requires_grad_(False)
    hidden = torch.randn(300, 8, requires_grad=True)  # more rows than one chunk of the vocabulary-wide work
    targets, upstream = torch.randint(0, 50, (300,)), torch.randn(300)
    composite = head(hidden).log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    (reference_grad,) = torch.autograd.grad((composite * upstream).sum(), hidden)
    fused = target_logprobs(head, hidden, targets)
    torch.testing.assert_close(fused, composite)
    for _ in range(2):  # the saved logits survive a backward
        (fused_grad,) = torch.autograd.grad((fused * upstream).sum(), hidden, retain_graph=True)
        torch.testing.assert_close(fused_grad, reference_grad)
    torch.autograd.gradcheck(
        lambda h: TargetLogprobs.apply(h, head.weight.double(), None, targets, False),
        (torch.randn(300, 8, dtype=torch.float64, requires_grad=True),),
    )
    assert target_logprobs(torch.nn.Linear(8, 50), hidden, targets) is None  # a trainable head: the composite runs


def test_the_sampler_writes_the_effective_weight_peft_would_merge(bank):
    layer = bank.base_model.get_decoder().layers[0].self_attn.q_proj
    with bank.use("policy"):
        part = ProjectionWeights.of(layer)
        out = torch.empty_like(part.weight)
        part.write_effective(out)
        # peft's merge, to float32 rounding (one fused multiply-add instead of its three passes)
        torch.testing.assert_close(
            out, part.weight.detach() + layer.get_delta_weight("policy").detach(), rtol=1e-6, atol=1e-7
        )


def test_the_effective_weight_adds_every_active_adapter():
    torch.manual_seed(0)
    model = get_peft_model(
        torch.nn.Sequential(torch.nn.Linear(16, 24)), LoraConfig(r=4, lora_alpha=8, target_modules=["0"])
    )
    model.add_adapter("second", LoraConfig(r=2, lora_alpha=6, target_modules=["0"]))
    model.base_model.set_adapter(["default", "second"])
    layer = model.base_model.model[0]
    for adapter_name in ("default", "second"):
        torch.nn.init.normal_(layer.lora_B[adapter_name].weight)
    part = ProjectionWeights.of(layer)
    assert part.adapters == ("default", "second")
    out = torch.empty_like(part.weight)
    part.write_effective(out)
    merged = part.weight.detach() + layer.get_delta_weight("default") + layer.get_delta_weight("second")
    torch.testing.assert_close(out, merged.detach())


@pytest.mark.parametrize("loss_fn", ["ppo", "cross_entropy"])
def test_without_untrained_logprobs_the_trained_positions_get_the_same_logprobs_loss_and_gradients(bank, loss_fn):
    data = ppo_data(seed=2)
    if loss_fn == "cross_entropy":
        data = [
            types.Datum(
                model_input=d.model_input,
                loss_fn_inputs={
                    "target_tokens": d.loss_fn_inputs["target_tokens"],
                    "weights": d.loss_fn_inputs["advantages"].to_torch().abs(),
                },
            )
            for d in data
        ]
    runs = []
    for untrained in (True, False):
        for parameter in bank.parameters("policy"):
            parameter.grad = None
        with bank.use("policy"):
            output = run_forward(
                bank.base_model,
                prepare_data(data, loss_fn, 512),
                loss_fn,
                {},
                backward=True,
                token_budget=1024,
                prefix_tree=True,
                untrained_logprobs=untrained,
            )
        runs.append((output, [parameter.grad.clone() for parameter in bank.parameters("policy")]))
    (every, every_gradients), (trained_only, trained_gradients) = runs
    assert trained_only.loss == pytest.approx(every.loss, rel=1e-6)
    for datum, full, partial in zip(data, every.loss_fn_outputs, trained_only.loss_fn_outputs, strict=True):
        gate = datum.loss_fn_inputs["advantages" if loss_fn == "ppo" else "weights"].to_torch()
        trained_N = gate != 0
        assert trained_N.any() and not trained_N.all()
        torch.testing.assert_close(partial["logprobs"].to_torch()[trained_N], full["logprobs"].to_torch()[trained_N])
        assert partial["logprobs"].to_torch()[~trained_N].isnan().all()  # no LM-head pass there
        torch.testing.assert_close(partial["elementwise_loss"].to_torch(), full["elementwise_loss"].to_torch())
    for ours, reference in zip(trained_gradients, every_gradients, strict=True):
        torch.testing.assert_close(ours, reference)
