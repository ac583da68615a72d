"""The Tinker-shaped training API on the tiny in-process model."""

import asyncio
import shutil

import peft
import pytest
import torch
from transformers import AutoModelForCausalLM

from sparring import EngineConfig, ServiceClient, types
from sparring.engine import DatumError


@pytest.fixture(scope="module")
def service(tiny_model_dir, tmp_path_factory):
    return ServiceClient(base_dir=tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="module")
def base(tiny_model_dir):
    return str(tiny_model_dir)


def chat_prompt(client, text="hello there, how are you?"):
    return client.get_renderer().render([{"role": "user", "content": text}])


def sft_datum(prompt, completion):
    tokens = prompt + completion
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(completion)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
    )


def learner_logprobs(client, tokens):
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0]},
    )
    return client.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()


def train_sft(client, datum, steps, lr=1e-2):
    losses = []
    for _ in range(steps):
        losses.append(client.forward_backward([datum], "cross_entropy").result().loss)
        client.optim_step(types.AdamParams(learning_rate=lr)).result()
    return losses


def test_sampler_logprobs_match_compute_logprobs_and_learner(service, base):
    client = service.create_lora_training_client(base, rank=8, seed=1)
    train_sft(client, sft_datum(chat_prompt(client), [5, 6, 7, 8]), steps=2)  # a non-zero adapter
    sampler = client.save_weights_and_get_sampling_client()
    prompt = chat_prompt(client)
    response = sampler.sample(
        types.ModelInput.from_ints(prompt), 3, types.SamplingParams(max_tokens=12, seed=3, stop=[])
    ).result()
    for sequence in response.sequences:
        full = prompt + sequence.tokens
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(full)).result()[len(prompt) :]
        learned = learner_logprobs(client, full)[len(prompt) - 1 :]
        # Tolerance: sampling runs with the LoRA merged into the weights and a KV cache; scoring runs unmerged.
        assert sequence.logprobs == pytest.approx(scored, abs=1e-4)
        assert sequence.logprobs == pytest.approx(learned, abs=1e-4)


def test_cross_entropy_steps_lower_the_loss(service, base):
    client = service.create_lora_training_client(base, rank=8, seed=0)
    losses = train_sft(client, sft_datum(chat_prompt(client), [11, 12, 13, 14, 15, 16]), steps=6)
    assert losses[-1] < 0.5 * losses[0]


def test_two_adapters_diverge_and_the_base_model_is_unchanged(service, base):
    base_sampler = service.create_sampling_client(base_model=base)
    first = service.create_lora_training_client(base, rank=8, seed=0)
    second = service.create_lora_training_client(base, rank=8, seed=0)
    prompt = chat_prompt(first)
    probe = prompt + [20, 21, 22]
    base_before = base_sampler.compute_logprobs(types.ModelInput.from_ints(probe)).result()
    train_sft(first, sft_datum(prompt, [30, 31, 32]), steps=3)
    train_sft(second, sft_datum(prompt, [40, 41, 42]), steps=3)
    # Sampling merges each adapter into the base weights and restores them: exercise it.
    for client in (first, second):
        client.save_weights_and_get_sampling_client(kind="inflight").sample(
            types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=4)
        ).result()
    assert learner_logprobs(first, probe) != pytest.approx(learner_logprobs(second, probe), abs=1e-3)
    base_after = base_sampler.compute_logprobs(types.ModelInput.from_ints(probe)).result()
    assert base_after[1:] == pytest.approx(base_before[1:], abs=1e-5)


def test_merging_for_sampling_restores_the_exact_base_weights(service, base):
    client = service.create_lora_training_client(base, rank=8, seed=1)
    train_sft(client, sft_datum(chat_prompt(client), [30, 31, 32]), steps=2)
    bank = client.engine.bank
    weights_before = {name: p.detach().clone() for name, p in bank.base_model.named_parameters() if "lora_" not in name}
    sampler = client.save_weights_and_get_sampling_client(kind="inflight")
    for _ in range(5):  # each sample merges, each forward_backward unmerges
        sampler.sample(types.ModelInput.from_ints(chat_prompt(client)), 1, types.SamplingParams(max_tokens=2)).result()
        client.forward([sft_datum(chat_prompt(client), [30])], "cross_entropy").result()
    for name, parameter in bank.base_model.named_parameters():
        if "lora_" not in name:
            assert torch.equal(parameter, weights_before[name]), name


def test_snapshot_is_frozen_while_inflight_follows_training(service, base):
    client = service.create_lora_training_client(base, rank=8, seed=0)
    prompt = chat_prompt(client)
    probe = types.ModelInput.from_ints(prompt + [50, 51])
    snapshot = client.save_weights_and_get_sampling_client()
    inflight = client.save_weights_and_get_sampling_client(kind="inflight")
    before = snapshot.compute_logprobs(probe).result()
    train_sft(client, sft_datum(prompt, [50, 51]), steps=2)
    assert snapshot.compute_logprobs(probe).result()[1:] == pytest.approx(before[1:], abs=1e-6)
    assert inflight.compute_logprobs(probe).result()[-1] > before[-1] + 0.1


def test_save_state_round_trip_is_exact_and_resumes_the_optimizer(service, base):
    datum = None
    uninterrupted = service.create_lora_training_client(base, rank=4, seed=7)
    datum = sft_datum(chat_prompt(uninterrupted), [60, 61, 62])
    train_sft(uninterrupted, datum, steps=2)
    path = uninterrupted.save_state("after-2").result().path
    restored = service.create_training_client_from_state_with_optimizer(path, base_model=base)
    probe = chat_prompt(uninterrupted) + [60, 61, 62]
    assert learner_logprobs(restored, probe) == learner_logprobs(uninterrupted, probe)
    # Two more steps on each: Adam moments were restored, so they stay identical.
    train_sft(uninterrupted, datum, steps=2)
    train_sft(restored, datum, steps=2)
    assert learner_logprobs(restored, probe) == pytest.approx(learner_logprobs(uninterrupted, probe), abs=1e-6)


def test_sampler_weights_are_a_peft_adapter_with_identical_logprobs(service, base, tiny_model_dir):
    client = service.create_lora_training_client(base, rank=8, seed=2)
    prompt = chat_prompt(client)
    train_sft(client, sft_datum(prompt, [70, 71, 72]), steps=3)
    path = client.save_weights_for_sampler("final").result().path
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    reloaded = peft.PeftModel.from_pretrained(fresh, path).eval()
    tokens = prompt + [70, 71, 72]
    with torch.no_grad():
        logits = reloaded(input_ids=torch.tensor([tokens])).logits[0, :-1].float()
    peft_logprobs = logits.log_softmax(-1).gather(-1, torch.tensor(tokens[1:])[:, None]).squeeze(-1).tolist()
    # Equal up to float32 rounding (~1e-6 relative): peft's forward and the learner order the sums differently.
    assert peft_logprobs == pytest.approx(learner_logprobs(client, tokens), abs=1e-4)
    sampler = service.create_sampling_client(model_path=path, base_model=base)
    # Scoring runs with the adapter merged into the base weights: float32 rounding differs slightly.
    assert sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[1:] == pytest.approx(
        peft_logprobs, abs=1e-4
    )


def test_same_seed_same_tokens_alone_or_batched(service, base):
    sampler = service.create_sampling_client(base_model=base)
    prompt = types.ModelInput.from_ints(chat_prompt(sampler))
    params = types.SamplingParams(max_tokens=10, seed=42, stop=[])
    alone = sampler.sample(prompt, 2, params).result()
    other = types.ModelInput.from_ints(
        chat_prompt(sampler, "a different and much longer question about the weather today")
    )
    futures = [sampler.sample(other, 3, types.SamplingParams(max_tokens=7)), sampler.sample(prompt, 2, params)]
    batched = futures[1].result()
    assert [s.tokens for s in alone.sequences] == [s.tokens for s in batched.sequences]
    assert alone.sequences[0].tokens != alone.sequences[1].tokens  # the two samples use different streams


def test_stop_token_ids_and_strings(service, base):
    sampler = service.create_sampling_client(base_model=base)
    prompt = types.ModelInput.from_ints(chat_prompt(sampler))
    free = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=30, seed=5, stop=[])).result().sequences[0]
    assert free.stop_reason == "length" and len(free.tokens) == 30
    stop_id = free.tokens[6]
    by_id = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=30, seed=5, stop=[stop_id])).result().sequences[0]
    assert by_id.stop_reason == "stop"
    assert by_id.tokens == free.tokens[: free.tokens.index(stop_id) + 1]
    tokenizer = sampler.get_tokenizer()
    text = tokenizer.decode(free.tokens[8:10])
    by_string = (
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=30, seed=5, stop=[text])).result().sequences[0]
    )
    assert by_string.stop_reason == "stop"
    assert text in tokenizer.decode(by_string.tokens)
    assert text not in tokenizer.decode(by_string.tokens[:-1])
    assert by_string.tokens == free.tokens[: len(by_string.tokens)]


def test_greedy_is_the_same_with_and_without_merging_and_with_the_generic_decoder(tiny_model_dir, tmp_path):
    prompt, outputs = None, []
    for config in (
        EngineConfig(),
        EngineConfig(merge_lora_for_sampling=False, fast_decoder=False, dtype="float32", batch_window_s=0.0),
    ):
        client = ServiceClient(base_dir=tmp_path, engine_config=config).create_lora_training_client(
            str(tiny_model_dir), rank=4, seed=9
        )
        prompt = chat_prompt(client)
        train_sft(client, sft_datum(prompt, [80, 81, 82]), steps=2)
        sampler = client.save_weights_and_get_sampling_client()
        outputs.append(
            sampler.sample(
                types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=12, temperature=0.0, stop=[])
            )
            .result()
            .sequences[0]
        )
    assert outputs[0].tokens == outputs[1].tokens
    assert outputs[0].logprobs == pytest.approx(outputs[1].logprobs, abs=1e-4)


def test_every_future_spelling(service, base):
    client = service.create_lora_training_client(base, rank=4, seed=0)
    datum = sft_datum(chat_prompt(client), [90, 91])

    async def run():
        direct = await client.forward_backward([datum], "cross_entropy")
        via_result = await client.forward_backward([datum], "cross_entropy").result_async()
        fut = await client.forward_backward_async([datum], "cross_entropy")
        awaited_future = await fut.result_async()
        handle = client.forward_backward_async([datum], "cross_entropy")
        via_handle = await handle.result_async()
        await client.optim_step_async(types.AdamParams(learning_rate=1e-3)).result_async()
        created = await service.create_lora_training_client_async(base_model=base, rank=4)
        return direct, via_result, awaited_future, via_handle, created

    direct, via_result, awaited_future, via_handle, created = asyncio.run(run())
    assert direct.loss == via_result.loss == awaited_future.loss == via_handle.loss
    assert created.result() is created and created.get_info().lora_rank == 4
    info = client.get_info()
    assert info.model_data.arch == "llama" and info.is_lora


def test_calls_run_in_submission_order(service, base):
    client = service.create_lora_training_client(base, rank=4, seed=0)
    datum = sft_datum(chat_prompt(client), [95, 96])
    futures = []
    for _ in range(3):
        futures.append(client.forward_backward([datum], "cross_entropy"))
        futures.append(client.optim_step(types.AdamParams(learning_rate=1e-2)))
    losses = [f.result().loss for f in futures[::2]]
    steps = [f.result().metrics["step"] for f in futures[1::2]]
    assert steps == [1.0, 2.0, 3.0]
    assert losses[0] > losses[1] > losses[2]


def test_length_one_inputs_broadcast_like_the_recipe(service, base):
    client = service.create_lora_training_client(base, rank=4, seed=0)
    tokens = chat_prompt(client)
    target = tokens[1:]
    short = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": target, "logprobs": [-0.3] * len(target), "advantages": [1.0]},
    )
    full = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": target, "logprobs": [-0.3] * len(target), "advantages": [1.0] * len(target)},
    )
    assert client.forward([short], "ppo").result().loss == pytest.approx(client.forward([full], "ppo").result().loss)


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"target_tokens": [1, 2]}, r"datum 1: loss_fn 'ppo' needs .* missing \['logprobs', 'advantages'\]"),
        (
            {"target_tokens": [1, 2], "logprobs": [0.0, 0.0, 0.0], "advantages": [1.0]},
            r"datum 1: loss_fn_inputs\['logprobs'\] has length 3; expected 2",
        ),
        (
            {"target_tokens": [1], "logprobs": [0.0], "advantages": [1.0]},
            r"datum 1: target_tokens has 1 tokens but model_input has 2",
        ),
        (
            {"target_tokens": [1, 10**7], "logprobs": [0.0, 0.0], "advantages": [1.0]},
            r"datum 1: target_tokens has token ids out of the vocabulary",
        ),
        (
            {"target_tokens": [1, 2], "logprobs": [0.0, 0.0], "advantages": [1.0], "mask": [1, 1]},
            r"datum 1: unknown loss_fn_inputs \['mask'\]",
        ),
    ],
)
def test_malformed_datums_name_the_datum_and_field(service, base, inputs, message):
    client = service.create_lora_training_client(base, rank=4, seed=0)
    good = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [2, 3], "logprobs": [0.0, 0.0], "advantages": [1.0]},
    )
    bad = types.Datum(model_input=types.ModelInput.from_ints([1, 2]), loss_fn_inputs=inputs)
    with pytest.raises(DatumError, match=message):
        client.forward_backward([good, bad], "ppo").result()
    # The client still works after a rejected request.
    assert client.forward_backward([good], "ppo").result().loss == pytest.approx(
        client.forward([good], "ppo").result().loss
    )


def test_bad_names_and_models_are_rejected(service, base):
    client = service.create_lora_training_client(base, rank=4, seed=0)
    with pytest.raises(ValueError, match="checkpoint name"):
        client.save_state("../escape")
    with pytest.raises(ValueError, match="smollm2-135m-instruct"):
        service.create_lora_training_client("no-such-model", rank=4)
    with pytest.raises(ValueError, match="rank"):
        service.create_lora_training_client(base, rank=0)


def test_sample_with_prompt_logprobs_returns_both(service, base):
    client = service.create_lora_training_client(base, rank=4, seed=2)
    sampler = client.save_weights_and_get_sampling_client(kind="inflight")
    prompt = types.ModelInput.from_ints(chat_prompt(client))
    response = sampler.sample(
        prompt, 2, types.SamplingParams(max_tokens=3, seed=1), include_prompt_logprobs=True
    ).result(timeout=60)
    assert len(response.sequences) == 2
    assert response.prompt_logprobs == pytest.approx(sampler.compute_logprobs(prompt).result(timeout=60))


def test_base_model_still_samples_after_every_adapter_is_deleted(tiny_model_dir, tmp_path):
    path = shutil.copytree(tiny_model_dir, tmp_path / "own-engine")  # its own engine: no other test's adapters
    service = ServiceClient(base_dir=tmp_path / "checkpoints")
    client = service.create_lora_training_client(str(path), rank=4, seed=0)
    prompt = types.ModelInput.from_ints(chat_prompt(client))
    engine = client.engine
    engine.call(lambda: [engine.bank.delete(name) for name in list(engine.bank.adapters)]).result(timeout=60)
    base_sampler = service.create_sampling_client(base_model=str(path))
    assert (
        len(base_sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2)).result(timeout=60).sequences[0].tokens)
        == 2
    )


@pytest.mark.parametrize("pack", [False, True], ids=["merged", "packed"])
def test_base_model_samples_after_every_adapter_is_deleted_and_a_new_one_is_made(tiny_model_dir, tmp_path, pack):
    path = shutil.copytree(tiny_model_dir, tmp_path / "delete-then-create")  # its own engine: no other test's adapters
    service = ServiceClient(base_dir=tmp_path / "checkpoints", engine_config=EngineConfig(pack_cpu_weights=pack))
    first = service.create_lora_training_client(str(path), rank=4, seed=1)
    prompt = types.ModelInput.from_ints(chat_prompt(first))
    engine, params = first.engine, types.SamplingParams(max_tokens=2, seed=3)
    base_sampler = service.create_sampling_client(base_model=str(path))
    before = base_sampler.sample(prompt, 1, params).result(timeout=60).sequences[0].tokens
    first.save_weights_and_get_sampling_client(kind="inflight").sample(prompt, 1, params).result(timeout=60)
    # Sampling left the adapter merged into the base weights, or, packing, folded into the sampler's copies only.
    assert engine.bank.merged_adapter == (None if pack else first.adapter)
    engine.release(first.adapter).result(timeout=60)
    service.create_lora_training_client(str(path), rank=4, seed=0)  # peft had kept naming the deleted one active
    assert base_sampler.sample(prompt, 1, params).result(timeout=60).sequences[0].tokens == before
