"""One training-and-sampling scenario written against the Tinker API, run three ways.

`run(types, service, base_model)` uses only what the `tinker` SDK and
sparring's in-process API share, so the same code runs on sparring's
`ServiceClient` (the expected numbers) and, as a script, on the real SDK
(newest, or 0.22 from its own venv) pointed at `sparring serve` through
TINKER_BASE_URL / TINKER_API_KEY:

    python tests/tinker_scenario.py BASE_MODEL   # prints one line: SCENARIO {json}

It returns plain numbers (losses, logprobs, sampled tokens) for the test to
compare, and covers: a LoRA client, every loss with its config,
forward_backward + optim_step, forward, a snapshot sampler with sample and
compute_logprobs, save_state -> create_training_client_from_state,
save_weights_for_sampler -> create_sampling_client, and a batch the SDK
splits into several requests.
"""

from __future__ import annotations

import importlib.util
import json
import sys

PROMPT = [11, 42, 97, 5, 230, 18]
COMPLETIONS = [[33, 71, 250, 9], [140, 2, 66, 301, 77]]
SAMPLER_LOGPROBS = [[-1.1, -2.3, -0.7, -3.0], [-0.4, -1.9, -2.2, -0.9, -1.5]]
ADVANTAGES = [1.0, -0.5]
LOSSES = [
    ("cross_entropy", None),
    ("importance_sampling", None),
    ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}),
    ("cispo", {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0}),
    ("dro", {"beta": 0.1}),
]


def ready(obj):
    """The client behind an SDK future (newer SDKs), or the client itself (0.22, sparring)."""
    result = getattr(obj, "result", None)
    return result() if callable(result) else obj


def batch(types, loss_fn: str) -> list:
    data = []
    for completion, behaviour, advantage in zip(COMPLETIONS, SAMPLER_LOGPROBS, ADVANTAGES, strict=True):
        tokens = PROMPT + completion
        pad = [0.0] * (len(PROMPT) - 1)
        if loss_fn == "cross_entropy":
            inputs = {"target_tokens": tokens[1:], "weights": pad + [1.0] * len(completion)}
        else:
            inputs = {
                "target_tokens": tokens[1:],
                "logprobs": pad + behaviour,
                "advantages": pad + [advantage] * len(completion),
            }
        data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs))
    return data


def outputs(result) -> dict:
    return {
        "loss": result.metrics["loss:sum"],
        "logprobs": [out["logprobs"].tolist() for out in result.loss_fn_outputs],
    }


def run(types, service, base_model: str) -> dict:
    found: dict = {}
    training = ready(service.create_lora_training_client(base_model=base_model, rank=4, seed=7, train_unembed=False))
    found["lora_rank"] = training.get_info().lora_rank
    if importlib.util.find_spec("transformers") is not None:
        found["vocab"] = len(training.get_tokenizer())

    first = training.forward_backward(
        batch(types, "ppo"), "ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
    )
    step = training.optim_step(types.AdamParams(learning_rate=0.05))
    found["first_ppo"] = outputs(first.result())
    found["grad_norm"] = step.result().metrics["grad_norm"]

    # Every loss, submitted back to back: the server must keep them in order.
    pending = [training.forward_backward(batch(types, name), name, config) for name, config in LOSSES]
    step = training.optim_step(types.AdamParams(learning_rate=0.05, weight_decay=0.01))
    for (name, _), future in zip(LOSSES, pending, strict=True):
        found[name] = outputs(future.result())
    found["grad_norm_all_losses"] = step.result().metrics["grad_norm"]

    # More datums than the SDK puts in one request (1024): it sends the chunks in parallel, the first one last.
    many = [
        types.Datum(
            model_input=types.ModelInput.from_ints([7 + n % 300, 8, 9]),
            loss_fn_inputs={"target_tokens": [8, 9, 10 + n % 200], "weights": [0.0, 1.0, 1.0]},
        )
        for n in range(1030)
    ]
    # (forward, not forward_backward + optim_step: Adam with eps=1e-12 turns the rounding differences of a
    # chunked gradient sum into full-size steps on near-zero gradients, so the numbers would not be comparable.)
    chunked = training.forward(many, "cross_entropy").result()
    found["chunked"] = {
        "loss": chunked.metrics["loss:sum"],
        "outputs": len(chunked.loss_fn_outputs),
        "last": chunked.loss_fn_outputs[-1]["logprobs"].tolist(),
    }
    found["forward"] = outputs(training.forward(batch(types, "cross_entropy"), "cross_entropy").result())

    sampler = ready(training.save_weights_and_get_sampling_client())
    params = types.SamplingParams(max_tokens=5, seed=123, temperature=1.0)
    sampled = sampler.sample(prompt=types.ModelInput.from_ints(PROMPT), num_samples=3, sampling_params=params).result()
    found["sample_tokens"] = [list(sequence.tokens) for sequence in sampled.sequences]
    found["sample_logprobs"] = [list(sequence.logprobs) for sequence in sampled.sequences]
    scored = types.ModelInput.from_ints(PROMPT + COMPLETIONS[0])
    found["snapshot_prompt_logprobs"] = sampler.compute_logprobs(scored).result()

    saved = training.save_state("checkpoint-1").result().path
    restored = ready(service.create_training_client_from_state(saved))
    found["restored_forward"] = outputs(restored.forward(batch(types, "cross_entropy"), "cross_entropy").result())
    training.load_state(saved).result()

    sampler_path = training.save_weights_for_sampler("final").result().path
    from_disk = ready(service.create_sampling_client(model_path=sampler_path))
    found["saved_sampler_prompt_logprobs"] = from_disk.compute_logprobs(scored).result()
    base = ready(service.create_sampling_client(base_model=base_model))
    found["base_prompt_logprobs"] = base.compute_logprobs(scored).result()
    return found


if __name__ == "__main__":
    import tinker
    from tinker import types as tinker_types

    client = tinker.ServiceClient()
    print("SCENARIO " + json.dumps(run(tinker_types, client, sys.argv[1])), flush=True)
    close = getattr(client, "close", None)
    if callable(close):
        close("success").result()
