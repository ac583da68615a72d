"""The sampler's compiled CPU kernels (engine/cpu_kernels.py): x @ W^T for a few rows with every output independent of
how the rows and weights were grouped, RMSNorm, one query per row attending to its cache, a whole decoder layer for a
decode step against Llama's ops (and sampling through it against the decoder's ops); the plain copies the matmul
multiplies (rewritten in place after an optimizer step); sampling through them; and the fallback to oneDNN and
torch's ops where they cannot be built."""

import logging
import shutil

import pytest
import torch
import torch.nn.functional as F

from sparring import EngineConfig, ServiceClient, types
from sparring.engine import cpu_kernels as kernel
from sparring.engine.decoder import FastDecoder
from sparring.engine.packed_weights import ProjectionWeights, packed
from sparring.engine.sampler import generate

needs_kernel = pytest.mark.skipif(not kernel.available(), reason="no x86 AVX2 CPU or C compiler here")


@needs_kernel
@pytest.mark.parametrize(
    "rows, outputs, inputs",
    [(1, 1, 1), (3, 7, 9), (4, 3, 8), (5, 49, 576), (33, 96, 17), (64, 12, 1536), (130, 10, 64)],
)
def test_row_matmul_multiplies_by_the_weight_transposed(rows, outputs, inputs):
    generator = torch.Generator().manual_seed(rows * 10_000 + outputs * 100 + inputs)
    x, weight, bias = (
        torch.randn(*shape, generator=generator) for shape in ((2, rows, inputs), (outputs, inputs), (outputs,))
    )
    tolerance = {"rtol": 1e-5, "atol": 1e-5 * inputs**0.5}
    torch.testing.assert_close(kernel.row_matmul(x, weight), x @ weight.t(), **tolerance)
    torch.testing.assert_close(kernel.row_matmul(x, weight, bias), x @ weight.t() + bias, **tolerance)


@needs_kernel
def test_each_output_has_the_same_bits_however_rows_and_weights_are_grouped():
    generator = torch.Generator().manual_seed(0)
    x, first, second = (torch.randn(*shape, generator=generator) for shape in ((70, 100), (25, 100), (8, 100)))
    together = kernel.row_matmul(x, torch.cat([first, second]))
    assert torch.equal(
        together, torch.cat([kernel.row_matmul(x, first), kernel.row_matmul(x, second)], dim=1)
    )  # a fused projection
    pieces = [kernel.row_matmul(x[start:end], torch.cat([first, second])) for start, end in ((0, 1), (1, 6), (6, 70))]
    assert torch.equal(together, torch.cat(pieces))  # a prompt prefilled in pieces, rows decoded alone


@needs_kernel
def test_a_weight_or_cache_that_is_not_contiguous_is_refused_by_name():
    x, weight = torch.randn(2, 8), torch.randn(8, 6)
    with pytest.raises(ValueError, match="weight_O_I must be contiguous"):
        kernel.row_matmul(x, weight.t())
    keys = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="keys_B_G_S_D must be contiguous"):
        kernel.decode_attention(
            torch.randn(1, 2, 4), keys.transpose(2, 3), keys, torch.ones(1, 5, dtype=torch.bool), 5, 0.5
        )


@needs_kernel
@pytest.mark.parametrize("shape", [(1, 576), (7, 33), (2, 3, 64)])
def test_rms_norm_is_torchs(shape):
    generator = torch.Generator().manual_seed(len(shape))
    x, weight = torch.randn(*shape, generator=generator), torch.randn(shape[-1], generator=generator)
    torch.testing.assert_close(
        kernel.rms_norm(x, weight, 1e-5), F.rms_norm(x, (shape[-1],), weight, 1e-5), rtol=1e-5, atol=1e-6
    )


@needs_kernel
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(9, 3, 64), (4, 4, 13), (8, 1, 32)])
def test_decode_attention_is_sdpa_over_the_valid_slots(heads, kv_heads, head_dim):
    generator = torch.Generator().manual_seed(heads * 100 + head_dim)
    batch, slots, length = 5, 40, 31
    query = torch.randn(batch, heads, head_dim, generator=generator)
    keys, values = (torch.randn(batch, kv_heads, slots, head_dim, generator=generator) for _ in range(2))
    valid = torch.rand(batch, slots, generator=generator) > 0.3
    valid[0, : length - 1] = False  # a row whose only real slot is its own
    allowed = valid[:, :length].clone()
    allowed[:, length - 1] = True
    bias = torch.zeros(batch, 1, 1, length).masked_fill_(~allowed[:, None, None, :], float("-inf"))
    expected = F.scaled_dot_product_attention(
        query[:, :, None], keys[:, :, :length], values[:, :, :length], attn_mask=bias, scale=0.125, enable_gqa=True
    )[:, :, 0]
    torch.testing.assert_close(
        kernel.decode_attention(query, keys, values, valid, length, 0.125), expected, rtol=1e-5, atol=1e-5
    )


def random_layer(
    heads: int, kv_heads: int, head_dim: int, hidden: int, inner: int, bias: bool, generator
) -> kernel.DecodeLayerWeights:
    def tensor(*shape):
        return torch.randn(*shape, generator=generator) / shape[-1] ** 0.5

    qkv_rows = (heads + 2 * kv_heads) * head_dim
    return kernel.DecodeLayerWeights(
        input_norm_E=1 + tensor(hidden), post_norm_E=1 + tensor(hidden), eps=1e-5,
        qkv_weight=tensor(qkv_rows, hidden), qkv_bias=tensor(qkv_rows) if bias else None,
        o_weight=tensor(hidden, heads * head_dim), o_bias=tensor(hidden) if bias else None,
        gate_up_weight=tensor(2 * inner, hidden), gate_up_bias=tensor(2 * inner) if bias else None,
        down_weight=tensor(hidden, inner), down_bias=tensor(hidden) if bias else None,
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, scale=head_dim**-0.5,
    )  # fmt: skip


def llama_layer_op_by_op(hidden_B_E, w: kernel.DecodeLayerWeights, cos_B_D, sin_B_D, keys, values, key_valid_B_S, slot):
    """The reference: Llama's decoder layer for one new token per row, as torch's ops compute it."""
    batch, width = hidden_B_E.shape
    heads, kv_heads, dim = w.heads, w.kv_heads, w.head_dim
    q, k, v = F.linear(F.rms_norm(hidden_B_E, (width,), w.input_norm_E, w.eps), w.qkv_weight, w.qkv_bias).split(
        [heads * dim, kv_heads * dim, kv_heads * dim], -1
    )

    def rotary(x_B_H_D):
        first, second = x_B_H_D.chunk(2, -1)
        return x_B_H_D * cos_B_D[:, None] + torch.cat((-second, first), -1) * sin_B_D[:, None]

    keys[:, :, slot] = rotary(k.reshape(batch, kv_heads, dim))
    values[:, :, slot] = v.reshape(batch, kv_heads, dim)
    sees_B_S = key_valid_B_S[:, : slot + 1].clone()
    sees_B_S[:, slot] = True
    attended = F.scaled_dot_product_attention(
        rotary(q.reshape(batch, heads, dim))[:, :, None],
        keys[:, :, : slot + 1],
        values[:, :, : slot + 1],
        attn_mask=sees_B_S[:, None, None],
        scale=w.scale,
        enable_gqa=True,
    )
    hidden_B_E = hidden_B_E + F.linear(attended.reshape(batch, heads * dim), w.o_weight, w.o_bias)
    gate, up = F.linear(F.rms_norm(hidden_B_E, (width,), w.post_norm_E, w.eps), w.gate_up_weight, w.gate_up_bias).chunk(
        2, -1
    )
    return hidden_B_E + F.linear(F.silu(gate) * up, w.down_weight, w.down_bias)


@needs_kernel
@pytest.mark.parametrize(
    "heads, kv_heads, head_dim, hidden, inner, bias",
    [(4, 2, 16, 64, 128, False), (9, 3, 10, 36, 52, True), (2, 2, 64, 130, 20, False)],
)
def test_decode_layer_is_the_llama_layer_op_by_op(heads, kv_heads, head_dim, hidden, inner, bias):
    generator = torch.Generator().manual_seed(heads * 100 + hidden)
    weights = random_layer(heads, kv_heads, head_dim, hidden, inner, bias, generator)
    batch, slots, slot = 5, 12, 9
    hidden_B_E = torch.randn(batch, hidden, generator=generator)
    angles_B_D = torch.rand(batch, head_dim // 2, generator=generator).repeat(1, 2) * 6
    cos_B_D, sin_B_D = angles_B_D.cos(), angles_B_D.sin()
    keys, values = (torch.randn(batch, kv_heads, slots, head_dim, generator=generator) for _ in range(2))
    key_valid_B_S = torch.rand(batch, slots, generator=generator) > 0.3
    key_valid_B_S[1, :slot] = False  # a row that sees only its own slot
    expected_keys, expected_values = keys.clone(), values.clone()
    expected = llama_layer_op_by_op(
        hidden_B_E, weights, cos_B_D, sin_B_D, expected_keys, expected_values, key_valid_B_S, slot
    )
    scratch = torch.empty(weights.scratch_floats(batch))
    kernel.decode_layer(hidden_B_E, weights, cos_B_D, sin_B_D, keys, values, key_valid_B_S, slot, scratch)
    torch.testing.assert_close(hidden_B_E, expected, rtol=1e-5, atol=1e-5)
    for cache, expected_cache in ((keys, expected_keys), (values, expected_values)):  # the new slot written, no other
        torch.testing.assert_close(cache, expected_cache, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_decode_layer_refuses_a_layout_it_cannot_read_by_name():
    generator = torch.Generator().manual_seed(0)
    weights = random_layer(4, 2, 16, 64, 128, False, generator)
    with pytest.raises(ValueError, match="o_weight must be contiguous"):
        kernel.DecodeLayerWeights(**{**vars(weights), "o_weight": weights.o_weight.t().contiguous().t()})
    keys = values = torch.zeros(3, 2, 8, 16)
    with pytest.raises(ValueError, match="scratch holds 10 floats; 3 rows need"):
        kernel.decode_layer(
            torch.zeros(3, 64),
            weights,
            torch.ones(3, 16),
            torch.zeros(3, 16),
            keys,
            values,
            torch.ones(3, 8, dtype=torch.bool),
            0,
            torch.empty(10),
        )


@needs_kernel
def test_a_decode_step_through_whole_layers_samples_what_the_ops_sample(tiny_model_dir, tmp_path):
    client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=3)
    engine = client.engine
    prompts = [
        client.get_renderer().render([{"role": "user", "content": text}])
        for text in ("hello there", "tell me a story about a cat")
    ]
    params = types.SamplingParams(max_tokens=12, temperature=1.0, stop=[])

    def sample(whole_layers: bool):
        jobs = [
            engine._make_job(prompt, 3, params.model_copy(update={"seed": seed})) for seed, prompt in enumerate(prompts)
        ]
        with engine.bank.inference(client.adapter, merge=False):
            decoder = FastDecoder(engine.bank.base_model, whole_layers=whole_layers)
            assert (decoder.kernel_layers is not None) == whole_layers
            return [
                s for r in generate(decoder, jobs, engine.tokenizer, engine.tokenizer.pad_token_id) for s in r.sequences
            ]

    for _ in range(2):  # the layers read the copies the adapter was folded into, rewritten after each step
        sft_step(client, prompts[0] + [40, 41, 42])
        whole, ops = (
            engine.call(lambda: sample(True)).result(timeout=60),
            engine.call(lambda: sample(False)).result(timeout=60),
        )
        assert [s.tokens for s in whole] == [s.tokens for s in ops]
        torch.testing.assert_close([s.logprobs for s in whole], [s.logprobs for s in ops], rtol=0, atol=1e-4)


def sft_step(client, tokens: list[int]) -> None:
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    client.forward_backward([datum], "cross_entropy").result(timeout=60)
    client.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)


@needs_kernel
def test_the_copy_of_an_adapted_group_is_rewritten_in_place_after_an_optimizer_step(tiny_model_dir, tmp_path):
    client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=3)
    engine = client.engine
    mlp = engine.bank.base_model.get_decoder().layers[0].mlp

    def copy_and_expected() -> tuple[torch.Tensor, torch.Tensor]:
        with engine.bank.use(client.adapter):
            parts = [ProjectionWeights.of(mlp.gate_proj), ProjectionWeights.of(mlp.up_proj)]
            assert all(part.adapters for part in parts)
            expected = torch.cat([torch.empty_like(part.weight) for part in parts])
            for part, block in zip(parts, expected.split([part.weight.shape[0] for part in parts]), strict=True):
                part.write_effective(block)
            return packed(parts, rows=True), expected

    first, expected = engine.call(copy_and_expected).result(timeout=60)
    assert torch.equal(first, expected)
    pointer, old_values = first.data_ptr(), first.clone()
    sft_step(client, [1, 2, 3, 4, 5, 6])
    second, expected = engine.call(copy_and_expected).result(timeout=60)
    assert second.data_ptr() == pointer and torch.equal(second, expected) and not torch.equal(second, old_values)


@needs_kernel
def test_the_kernels_sample_what_onednn_and_torchs_ops_and_the_merged_weights_sample(tiny_model_dir, tmp_path):
    def client(name: str, config: EngineConfig):
        path = shutil.copytree(tiny_model_dir, tmp_path / name)  # an engine of its own per setting
        return ServiceClient(
            base_dir=tmp_path / f"checkpoints-{name}", engine_config=config
        ).create_lora_training_client(str(path), rank=4, seed=3)

    configs = {
        "kernels": EngineConfig(),
        "torch": EngineConfig(sampler_cpu_kernels=False),
        "merged": EngineConfig(pack_cpu_weights=False, sampler_cpu_kernels=False),
    }
    clients = [client(name, config) for name, config in configs.items()]
    prompt = clients[0].get_renderer().render([{"role": "user", "content": "what is two plus two?"}])
    params = types.SamplingParams(max_tokens=8, temperature=1.0, stop=[], seed=5)
    for _ in range(2):  # after each optimizer step the copies must follow the new LoRA weights
        samples = []
        for training_client in clients:
            sft_step(training_client, prompt + [40, 41, 42])
            sampler = training_client.save_weights_and_get_sampling_client(kind="inflight")
            sequence = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result(timeout=60).sequences[0]
            samples.append(sequence)
        kernels, *others = samples
        for other in others:
            assert kernels.tokens == other.tokens
            torch.testing.assert_close(kernels.logprobs, other.logprobs, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "compiler, reason",
    [("no-such-compiler", "no C compiler 'no-such-compiler'"), ("false", "false could not build cpu_kernels.c")],
)
def test_where_the_kernel_cannot_be_built_the_reason_is_logged_and_onednn_multiplies(
    tiny_model_dir, tmp_path, monkeypatch, caplog, compiler, reason
):
    if kernel._unsupported() is not None and "compiler" not in kernel._unsupported():
        pytest.skip(kernel._unsupported())
    monkeypatch.setenv("CC", compiler)
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path / "home"))
    kernel._library.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=kernel.__name__):
            assert not kernel.available()
        assert reason in caplog.text and "oneDNN" in caplog.text
        client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=3)
        decoder = client.engine.call(lambda: FastDecoder(client.engine.bank.base_model)).result(timeout=60)
        assert not decoder.kernels and decoder.packing is not None and not decoder.packing.rows
    finally:
        monkeypatch.undo()
        kernel._library.cache_clear()


def test_the_declared_kernel_parameters_are_the_cs_and_ctypes_takes_them_from_the_declaration():
    source = kernel._SOURCE.read_text()
    assert kernel.prototype_mismatches(source) == []
    added = source.replace("long slot, float scale", "long slot, long extra, float scale")
    retyped = source.replace("long M, long N, long K, int threads", "long M, long N, int K, int threads")
    renamed = source.replace("void rotary(", "void rotate(")
    (layer,) = kernel.prototype_mismatches(added)
    assert layer.startswith("decode_layer takes (") and "long extra" in layer
    (matmul,) = kernel.prototype_mismatches(retyped)
    assert matmul.startswith("row_matmul takes (") and "int K" in matmul
    assert kernel.prototype_mismatches(renamed) == [
        "rotary is declared in KERNEL_PARAMETERS but not defined",
        "rotate is defined but not declared in KERNEL_PARAMETERS",
    ]
    if kernel.available():
        for name, parameters in kernel.KERNEL_PARAMETERS.items():
            assert len(getattr(kernel._library(), name).argtypes) == len(parameters.split(","))


def test_a_source_that_disagrees_with_the_declaration_turns_the_kernels_off_with_the_reason(
    tmp_path, monkeypatch, caplog
):
    changed = tmp_path / "cpu_kernels.c"
    changed.write_text(kernel._SOURCE.read_text().replace("long M, long K, float eps)", "long M, float eps)"))
    monkeypatch.setattr(kernel, "_SOURCE", changed)
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path / "home"))
    kernel._library.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=kernel.__name__):
            assert not kernel.available()
        assert "cpu_kernels.c and KERNEL_PARAMETERS disagree: rms_norm takes (" in caplog.text
        assert not (tmp_path / "home" / "kernels").exists()  # refused before anything was built
    finally:
        monkeypatch.undo()
        kernel._library.cache_clear()


def test_the_attention_limits_reach_the_c_only_from_the_python(tmp_path):
    """cpu_kernels.c defines no limits of its own: it is built with ATTENTION_LIMITS, and refuses to build without."""
    source = kernel._SOURCE.read_text()
    assert "#define MAX_GROUP" not in source and "#define MAX_HEAD_DIM" not in source
    limits = kernel.ATTENTION_LIMITS
    assert {f"-DMAX_GROUP={limits['group']}", f"-DMAX_HEAD_DIM={limits['head_dim']}"} <= set(kernel._FLAGS)
    if kernel._unsupported() is not None:
        pytest.skip(kernel._unsupported())
    import subprocess

    bare = [flag for flag in kernel._FLAGS if not flag.startswith("-D")]
    built = subprocess.run(
        [kernel._compiler(), *bare, "-fsyntax-only", str(kernel._SOURCE)], capture_output=True, text=True
    )
    assert built.returncode != 0 and "ATTENTION_LIMITS" in built.stderr
