"""The sampler's fused projections (q/k/v, gate/up as one matmul) against running each projection alone,
through oneDNN-packed copies of the weights and through the weights themselves."""

import pytest
import torch

from sparring import ServiceClient, types
from sparring.engine.decoder import FastDecoder
from sparring.engine.sampler import generate


def sft_step(client, tokens):
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    client.forward_backward([datum], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=1e-2)).result()


@pytest.mark.parametrize("pack", [False, True], ids=["weights", "packed"])
def test_fused_projections_sample_the_same_tokens_and_logprobs_and_follow_in_place_merges(
    tiny_model_dir, tmp_path, pack
):
    client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=3)
    engine, renderer = client.engine, client.get_renderer()
    prompts = [
        renderer.render([{"role": "user", "content": text}])
        for text in ("hello there", "what is two plus two?", "tell me a story about a cat")
    ]
    for _ in range(2):  # a trained adapter, so the merge changes the weights
        sft_step(client, prompts[0] + [40, 41, 42])
    params = types.SamplingParams(max_tokens=12, temperature=1.0, stop=[])

    def sample(fuse: bool, adapter: str | None) -> list[list[tuple[int, float]]]:
        jobs = [
            engine._make_job(prompt, 2, params.model_copy(update={"seed": seed})) for seed, prompt in enumerate(prompts)
        ]
        with engine.bank.inference(adapter, merge=True):
            # Op by op: a whole layer in one kernel call rounds differently from the ops (tests/test_cpu_kernels.py).
            decoder = FastDecoder(engine.bank.base_model, fuse_projections=fuse, pack_weights=pack, whole_layers=False)
            responses = generate(decoder, jobs, engine.tokenizer, engine.tokenizer.pad_token_id)
        return [list(zip(s.tokens, s.logprobs, strict=True)) for r in responses for s in r.sequences]

    def run_on_worker(fn):
        return engine.call(fn).result()

    attention = engine.bank.base_model.get_decoder().layers[0].self_attn
    base_separate = run_on_worker(lambda: sample(False, None))
    base_fused = run_on_worker(lambda: sample(True, None))
    q, k, v = (
        attention.q_proj.get_base_layer().weight,
        attention.k_proj.get_base_layer().weight,
        attention.v_proj.get_base_layer().weight,
    )
    pointers = [w.data_ptr() for w in (q, k, v)]
    if not pack:  # one buffer now (a packed copy of the three leaves the weights where they are)
        assert (
            pointers[1] == pointers[0] + q.numel() * q.element_size()
            and pointers[2] == pointers[1] + k.numel() * k.element_size()
        )
    adapted_fused = run_on_worker(
        lambda: sample(True, client.adapter)
    )  # merged in place: the fused weight sees the adapter
    adapted_separate = run_on_worker(lambda: sample(False, client.adapter))
    assert [w.data_ptr() for w in (q, k, v)] == pointers
    assert (
        base_fused == base_separate and adapted_fused == adapted_separate
    )  # the same tokens and bit-identical logprobs
    assert adapted_fused != base_fused
    assert len(base_fused) == 6 and all(len(row) == 12 for row in base_fused)
    torch.testing.assert_close(
        run_on_worker(lambda: sample(True, None)), base_separate, rtol=0, atol=0
    )  # unmerged exactly


def test_packed_weights_follow_merges_and_match_the_weights_themselves(tiny_model_dir, tmp_path):
    client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=3)
    engine, renderer = client.engine, client.get_renderer()
    prompt = renderer.render([{"role": "user", "content": "what is two plus two?"}])
    params = types.SamplingParams(max_tokens=8, temperature=1.0, stop=[], seed=5)

    def sample(pack: bool) -> list[tuple[int, float]]:
        with engine.bank.inference(client.adapter, merge=True):
            decoder = FastDecoder(engine.bank.base_model, pack_weights=pack)
            response = generate(
                decoder, [engine._make_job(prompt, 1, params)], engine.tokenizer, engine.tokenizer.pad_token_id
            )[0]
        return list(zip(response.sequences[0].tokens, response.sequences[0].logprobs, strict=True))

    for _ in range(3):  # each step changes the LoRA weights, so each merge writes new base weights to pack again
        sft_step(client, prompt + [40, 41, 42])
        packed, plain = engine.call(lambda: sample(True)).result(), engine.call(lambda: sample(False)).result()
        assert [token for token, _ in packed] == [token for token, _ in plain]
        torch.testing.assert_close([lp for _, lp in packed], [lp for _, lp in plain], rtol=0, atol=1e-4)


def test_the_engine_decides_its_decoder_path_once_and_sampling_and_merging_follow_it(
    tiny_model_dir, tmp_path, monkeypatch
):
    from sparring.engine import decoder as decoder_module

    client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=3)
    engine = client.engine
    path = engine.decoder_path
    assert path.fast and path.folds_adapter == decoder_module.packable([torch.zeros(1)])
    assert engine._merge == (not path.folds_adapter and engine.loaded.dtype == torch.float32)

    def asked_again(*args):
        raise AssertionError("the decoder path was decided again")

    built, build = [], decoder_module.DecoderPath.build
    monkeypatch.setattr(decoder_module.FastDecoder, "supports", staticmethod(asked_again))
    monkeypatch.setattr(
        decoder_module.DecoderPath, "build", lambda self, model: built.append(self) or build(self, model)
    )
    sampler = client.save_weights_and_get_sampling_client("decided")
    params = types.SamplingParams(max_tokens=2, seed=1)
    assert len(sampler.sample(types.ModelInput.from_ints([5, 9, 13]), 1, params).result(timeout=60).sequences) == 1
    assert built == [path]
