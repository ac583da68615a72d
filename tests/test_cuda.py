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
    sequence = sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=8, seed=0)).result().sequences[0]
    tokens = prompt + sequence.tokens
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "logprobs": [0.0] * (len(prompt) - 1) + sequence.logprobs, "advantages": [0.0] * (len(prompt) - 1) + [1.0] * len(sequence.tokens)},
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
    params = types.SamplingParams(max_tokens=16, seed=1, temperature=1.5, constraint=types.OutputConstraint(choices=choices))
    for sequence in sampler.sample(types.ModelInput.from_ints(prompt), 8, params).result().sequences:
        assert renderer.parse_response(sequence.tokens, tool_calls=False)["content"] in choices
        assert all(is_allowed(allowed, token) for allowed, token in zip(sequence.allowed_tokens, sequence.tokens))
        tokens = prompt + sequence.tokens
        counts, allowed = flatten_allowed([[] for _ in prompt[1:]] + sequence.allowed_tokens)
        inputs = {"target_tokens": tokens[1:], "weights": [0.0] * (len(tokens) - 1), "allowed_counts": counts, "allowed_tokens": allowed}
        out = client.forward([types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)], "cross_entropy").result()
        assert out.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt) - 1 :] == pytest.approx(sequence.logprobs, abs=5e-2)  # bfloat16
