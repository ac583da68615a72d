"""The CUDA path (bfloat16 weights): skipped where no GPU is present."""

import pytest
import torch

from sparring import EngineConfig, ServiceClient, types

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_sample_and_train_on_cuda(tiny_model_dir, tmp_path):
    service = ServiceClient(base_dir=tmp_path, engine_config=EngineConfig(device="cuda"))
    client = service.create_lora_training_client(str(tiny_model_dir), rank=8, seed=0)
    prompt = client.get_renderer().render([{"role": "user", "content": "hello"}])
    sampler = client.save_weights_and_get_sampling_client()
    sequence = (
        sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=8, seed=0))
        .result()
        .sequences[0]
    )
    tokens = prompt + sequence.tokens
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * (len(prompt) - 1) + sequence.logprobs,
            "advantages": [0.0] * (len(prompt) - 1) + [1.0] * len(sequence.tokens),
        },
    )
    out = client.forward_backward([datum], "ppo").result()
    learner = out.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt) - 1 :]
    assert sequence.logprobs == pytest.approx(learner, abs=5e-2)  # bfloat16
    assert client.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics["grad_norm"] > 0


def test_constrained_choices_on_cuda(tiny_model_dir, tmp_path):
    """Masks built on the logits' device: only the choices are sampled, and the learner renormalises the same way."""
    from sparring.engine.allowed_tokens import flatten_allowed, is_allowed

    choices = ["Player1", "Player2", "Player10", "nobody"]
    service = ServiceClient(base_dir=tmp_path, engine_config=EngineConfig(device="cuda"))
    client = service.create_lora_training_client(str(tiny_model_dir), rank=8, seed=0)
    renderer = client.get_renderer()
    prompt = renderer.render([{"role": "user", "content": "Who is the werewolf?"}])
    sampler = client.save_weights_and_get_sampling_client()
    params = types.SamplingParams(
        max_tokens=16, seed=1, temperature=1.5, constraint=types.OutputConstraint(choices=choices)
    )
    for sequence in sampler.sample(types.ModelInput.from_ints(prompt), 8, params).result().sequences:
        assert renderer.parse_response(sequence.tokens, tool_calls=False)["content"] in choices
        assert all(
            is_allowed(allowed, token) for allowed, token in zip(sequence.allowed_tokens, sequence.tokens, strict=True)
        )
        tokens = prompt + sequence.tokens
        counts, allowed = flatten_allowed([[] for _ in prompt[1:]] + sequence.allowed_tokens)
        inputs = {
            "target_tokens": tokens[1:],
            "weights": [0.0] * (len(tokens) - 1),
            "allowed_counts": counts,
            "allowed_tokens": allowed,
        }
        out = client.forward(
            [types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)], "cross_entropy"
        ).result()
        assert out.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt) - 1 :] == pytest.approx(
            sequence.logprobs, abs=5e-2
        )  # bfloat16


def test_prefix_cache_on_cuda_samples_as_without_it(tiny_model_dir, tmp_path):
    """Cached keys and values live on the GPU; in float32 a cached prefix samples the tokens and logprobs a full
    prefill does."""
    import shutil

    samplers = []
    for mib in (64, 0):
        path = shutil.copytree(tiny_model_dir, tmp_path / f"tiny-{mib}")  # an engine each
        service = ServiceClient(
            base_dir=tmp_path / f"ckpt-{mib}",
            engine_config=EngineConfig(device="cuda", dtype="float32", prefix_cache_mib=mib),
        )
        samplers.append(service.create_sampling_client(base_model=str(path)))
    prompt = (
        samplers[0]
        .get_renderer()
        .render(
            [
                {"role": "system", "content": "You play werewolf with six others."},
                {"role": "user", "content": "Who is the werewolf?"},
            ]
        )
    )
    params = types.SamplingParams(max_tokens=8, seed=4, stop=[])
    for _ in range(2):  # the second call reads the prompt from the cache
        cached, uncached = (
            s.sample(types.ModelInput.from_ints(prompt), 3, params).result().sequences for s in samplers
        )
        for a, b in zip(cached, uncached, strict=True):
            assert a.tokens == b.tokens and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    engine = samplers[0].engine
    assert engine.prefix_cache.bytes > 0 and engine.prefill_counts.cached_tokens == len(prompt) - 1
