"""The learner's fused layer ops (engine/learner_layers.py) and the vocabulary-wide kernels of its head's target
logprobs against transformers' and torch's ops, forward and backward; the learner through them against the
composite path (tries and padded batches); and what `fused_layers` routes, where, and puts back."""

import pytest
import test_learner_ops
import torch
import torch.nn.functional as F
from test_learner_ops import forward_backward, ppo_data
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from sparring.engine import cpu_kernels
from sparring.engine.learner_layers import RmsNorm, Rotary, SiluProduct, fused_layers

bank = test_learner_ops.bank  # the fixture, shared with test_learner_ops

needs_kernels = pytest.mark.skipif(not cpu_kernels.available(), reason="no x86 AVX2 CPU or C compiler here")


def gradients(function, inputs: list[torch.Tensor], upstream: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = function(*inputs)
    return out, list(torch.autograd.grad(out, inputs, upstream))


@needs_kernels
@pytest.mark.parametrize("shape", [(1, 576), (3, 5, 37), (130, 8)])
def test_rms_norm_is_llamas_forward_and_backward(shape):
    generator = torch.Generator().manual_seed(len(shape))
    norm = LlamaRMSNorm(shape[-1], eps=1e-5).requires_grad_(False)
    norm.weight.copy_(torch.randn(shape[-1], generator=generator))
    x, upstream = torch.randn(*shape, generator=generator, requires_grad=True), torch.randn(*shape, generator=generator)
    reference, (reference_grad,) = gradients(norm, [x], upstream)
    ours, (our_grad,) = gradients(lambda x: RmsNorm.apply(x, norm.weight, 1e-5), [x], upstream)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(our_grad, reference_grad, rtol=1e-4, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("batch, length, heads, head_dim", [(1, 7, 3, 64), (2, 5, 4, 10), (3, 1, 1, 2)])
def test_rotary_is_llamas_apply_rotary_pos_emb_forward_and_backward(batch, length, heads, head_dim):
    generator = torch.Generator().manual_seed(head_dim)
    # cos and sin need not repeat across the halves: every entry is checked
    cos, sin = (torch.randn(batch, length, head_dim, generator=generator) for _ in range(2))
    x = torch.randn(batch, length, heads * head_dim, generator=generator, requires_grad=True)
    upstream = torch.randn(batch, heads, length, head_dim, generator=generator)

    def llamas(x):
        heads_first = x.view(batch, length, heads, head_dim).transpose(1, 2)
        return apply_rotary_pos_emb(heads_first, heads_first, cos, sin)[0]

    reference, (reference_grad,) = gradients(llamas, [x], upstream)
    ours, (our_grad,) = gradients(
        lambda x: Rotary.apply(x, cos, sin), [x], upstream.transpose(2, 3).contiguous().transpose(2, 3)
    )  # a strided gradient
    assert ours.shape == (batch, heads, length, head_dim) and ours.is_contiguous()
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(our_grad, reference_grad, rtol=1e-5, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize("count", [5, 4096, 2 * 4096 + 13])
def test_silu_product_is_torchs_forward_and_backward(count):
    generator = torch.Generator().manual_seed(count)
    gate = (torch.randn(count, generator=generator) * 8).requires_grad_()  # far into both tails of the sigmoid
    up, upstream = torch.randn(count, generator=generator, requires_grad=True), torch.randn(count, generator=generator)
    reference, reference_grads = gradients(lambda gate, up: F.silu(gate) * up, [gate, up], upstream)
    ours, our_grads = gradients(SiluProduct.apply, [gate, up], upstream)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(our_grads, reference_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("rows, vocabulary", [(1, 8), (5, 49), (3, 1000)])
def test_the_heads_vocabulary_wide_kernels_are_torchs_log_softmax_and_its_gradient(rows, vocabulary):
    generator = torch.Generator().manual_seed(vocabulary)
    logits = (torch.randn(rows, vocabulary, generator=generator) * 10).requires_grad_()
    targets, upstream = (
        torch.randint(0, vocabulary, (rows,), generator=generator),
        torch.randn(rows, generator=generator),
    )
    log_normaliser = cpu_kernels.log_sum_exp_rows(logits.detach())
    torch.testing.assert_close(log_normaliser, torch.logsumexp(logits.detach(), -1), rtol=1e-6, atol=1e-5)
    (reference,) = torch.autograd.grad(
        logits.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1), logits, upstream
    )
    ours = cpu_kernels.target_logprob_gradient(
        logits.detach(), log_normaliser, upstream, targets, torch.empty(rows, vocabulary)
    )
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="targets_M must be int64"):
        cpu_kernels.target_logprob_gradient(
            logits.detach(), log_normaliser, upstream, targets.int(), torch.empty(rows, vocabulary)
        )


@needs_kernels
@pytest.mark.parametrize("prefix_tree", [True, False], ids=["trie", "padded"])
def test_the_learner_runs_its_layers_through_the_fused_ops_with_the_composites_results(bank, prefix_tree, monkeypatch):
    calls = []
    for op in (RmsNorm, Rotary, SiluProduct):
        monkeypatch.setattr(
            op,
            "forward",
            staticmethod(lambda ctx, *args, _op=op, _forward=op.forward: calls.append(_op) or _forward(ctx, *args)),
        )
    data = ppo_data(seed=1)
    fused, fused_gradients = forward_backward(bank, data, fused=True, pack=True, prefix_tree=prefix_tree)
    layers = len(bank.base_model.get_decoder().layers)
    assert (
        calls.count(RmsNorm) == 2 * layers + 1
        and calls.count(Rotary) == 2 * layers
        and calls.count(SiluProduct) == layers
    )
    calls.clear()
    composite, composite_gradients = forward_backward(bank, data, fused=False, prefix_tree=prefix_tree)
    assert calls == []
    for ours, reference in zip(fused.loss_fn_outputs, composite.loss_fn_outputs, strict=True):
        torch.testing.assert_close(ours["logprobs"].to_torch(), reference["logprobs"].to_torch(), rtol=1e-5, atol=1e-5)
    assert all(gradient.abs().sum() > 0 for gradient in composite_gradients)
    for ours, reference in zip(fused_gradients, composite_gradients, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-5 * float(reference.abs().max()))


def test_fused_layers_route_only_where_the_kernels_run_and_put_every_forward_back(bank, monkeypatch):
    model = bank.base_model
    decoder = model.get_decoder()
    if cpu_kernels.available():
        with fused_layers(model) as routed:
            assert routed and all(
                "forward" in vars(module)
                for layer in decoder.layers
                for module in (layer.input_layernorm, layer.self_attn, layer.mlp)
            )
        assert not any("forward" in vars(module) for module in model.modules())
    monkeypatch.setattr(
        cpu_kernels, "available", lambda: False
    )  # no compiler, or not an AVX2 CPU: the model's own forwards
    with fused_layers(model) as routed:
        assert not routed and not any("forward" in vars(module) for module in model.modules())


@needs_kernels
def test_a_qwen3_model_keeps_its_own_attention_with_q_and_k_norms_and_a_trained_norm_its_own_forward():
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    model = Qwen3ForCausalLM(config).eval().requires_grad_(False)
    model.model.norm.weight.requires_grad_(True)
    tokens = torch.randint(0, 64, (2, 9))
    reference = model(input_ids=tokens).logits
    with fused_layers(model):
        layer = model.model.layers[0]
        assert (
            "forward" not in vars(layer.self_attn)
            and "forward" in vars(layer.self_attn.q_norm)
            and "forward" in vars(layer.mlp)
        )
        assert "forward" not in vars(model.model.norm)  # trained: autograd must give its weight a gradient
        torch.testing.assert_close(model(input_ids=tokens).logits, reference, rtol=1e-5, atol=1e-5)
