"""MinT's multi-agent debate recipe, written for MinT's own client and run against `sparring serve`.

Two LoRA training clients on one base model argue opposite sides of a topic;
the frozen base model judges each pair of arguments (asked in both orders, so
its position bias cancels); the winner's tokens get advantage +1, the
loser's -0.5; both take a PPO step on their own sampled tokens; both save
their weights for sampling, and a sampler on each saved adapter argues once
more. Only `mint` is imported: the same file runs on MinT's cluster or on your
machine, and the environment says which.

    pip install mindlab-toolkit==0.2.0                         # MinT's client: the tinker 0.22 SDK underneath
    sparring serve --model smollm2-135m-instruct --api-key tml-local   # another shell, another environment
    MINT_BASE_URL=http://127.0.0.1:8000 MINT_API_KEY=tml-local MINT_BASE_MODEL=smollm2-135m-instruct \\
        python examples/mint_debate.py --epochs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

import mint
from mint import types

BASE_MODEL = os.environ.get("MINT_BASE_MODEL", "Qwen/Qwen3-0.6B")
LORA_RANK = int(os.environ.get("MINT_LORA_RANK", "16"))
TOPICS = [
    ("Should AI be regulated?", ["Yes, AI needs safety oversight", "No, regulation stifles innovation"]),
    ("Is climate change urgent?", ["Yes, urgent action is needed now", "No, we have time to adapt"]),
]
WIN, LOSS = 1.0, -0.5


def chat_tokens(tokenizer, content: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer.encode(text, add_special_tokens=False)


def debater_prompt(tokenizer, topic: str, stance: str) -> list[int]:
    return chat_tokens(tokenizer, f"Topic: {topic}\nYour position: {stance}\nArgue for it in two sentences.")


async def first_is_better(judge, tokenizer, topic: str, first: str, second: str) -> bool:
    """The base model's log-odds of answering '1' over '2', summed over both orders of the arguments."""
    answers = [tokenizer.encode(answer, add_special_tokens=False) for answer in ("1", "2")]

    async def log_odds(a: str, b: str) -> float:
        prompt = chat_tokens(
            tokenizer,
            f"Topic: {topic}\nArgument 1: {a}\nArgument 2: {b}\nWhich argument is more convincing? Answer 1 or 2.",
        )
        one, two = await asyncio.gather(
            *(judge.compute_logprobs_async(types.ModelInput.from_ints(prompt + answer)) for answer in answers)
        )
        return sum(one[len(prompt) :]) - sum(two[len(prompt) :])

    as_asked, swapped = await asyncio.gather(log_odds(first, second), log_odds(second, first))
    return as_asked >= swapped


def ppo_datum(prompt: list[int], sequence, advantage: float) -> types.Datum:
    tokens = prompt + list(sequence.tokens)
    before = len(prompt) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * before + list(sequence.logprobs),
            "advantages": [0.0] * before + [advantage] * len(sequence.tokens),
        },
    )


async def debate(service, epochs: int, arguments: int, max_tokens: int, learning_rate: float) -> dict:
    debaters = [
        await service.create_lora_training_client_async(base_model=BASE_MODEL, rank=LORA_RANK) for _ in range(2)
    ]
    tokenizer = debaters[0].get_tokenizer()
    judge = await service.create_sampling_client_async(base_model=BASE_MODEL)
    params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0)
    losses: list[list[float]] = [[], []]
    for epoch in range(epochs):
        for topic, stances in TOPICS:
            samplers = [await debater.save_weights_and_get_sampling_client_async() for debater in debaters]
            prompts = [debater_prompt(tokenizer, topic, stance) for stance in stances]
            replies = await asyncio.gather(
                *(
                    sampler.sample_async(types.ModelInput.from_ints(p), arguments, params)
                    for sampler, p in zip(samplers, prompts, strict=True)
                )
            )
            texts = [
                [tokenizer.decode(seq.tokens, skip_special_tokens=True) for seq in reply.sequences] for reply in replies
            ]
            verdicts = await asyncio.gather(
                *(first_is_better(judge, tokenizer, topic, a, b) for a, b in zip(*texts, strict=True))
            )
            rewards = [[WIN if won else LOSS for won in verdicts], [LOSS if won else WIN for won in verdicts]]
            batches = [
                [
                    ppo_datum(prompts[side], seq, reward)
                    for seq, reward in zip(replies[side].sequences, rewards[side], strict=True)
                ]
                for side in range(2)
            ]
            # Awaiting a *_async call submits it and gives its future: both debaters' work is queued before either
            # result is awaited.
            passes = [
                await debater.forward_backward_async(batch, loss_fn="ppo")
                for debater, batch in zip(debaters, batches, strict=True)
            ]
            steps = [
                await debater.optim_step_async(types.AdamParams(learning_rate=learning_rate)) for debater in debaters
            ]
            for side, (submitted, step) in enumerate(zip(passes, steps, strict=True)):
                losses[side].append((await submitted.result_async()).metrics["loss:sum"])
                await step.result_async()
            print(
                f"epoch {epoch} {topic!r}: debater 1 won {verdicts.count(True)}/{len(verdicts)}, loss "
                f"{losses[0][-1]:+.3f} / {losses[1][-1]:+.3f}"
            )
    saved = [
        await (await debater.save_weights_for_sampler_async(name=f"debater-{n + 1}")).result_async()
        for n, debater in enumerate(debaters)
    ]
    paths = [checkpoint.path for checkpoint in saved]
    argued = []
    for path, stance in zip(paths, TOPICS[0][1], strict=True):
        trained = await service.create_sampling_client_async(model_path=path)
        prompt = types.ModelInput.from_ints(debater_prompt(tokenizer, TOPICS[0][0], stance))
        tokens = (await trained.sample_async(prompt, 1, params)).sequences[0].tokens
        argued.append({"path": path, "tokens": len(tokens), "text": tokenizer.decode(tokens, skip_special_tokens=True)})
        print(f"{path}: {argued[-1]['text']!r}")
    return {"losses": losses, "paths": paths, "arguments": argued}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--arguments", type=int, default=4, help="arguments each side makes per topic")
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--report", help="also write the losses, checkpoint paths and final arguments here as JSON")
    args = parser.parse_args()
    result = asyncio.run(debate(mint.ServiceClient(), args.epochs, args.arguments, args.max_tokens, args.learning_rate))
    if args.report:
        with open(args.report, "w") as out:
            json.dump(result, out)


if __name__ == "__main__":
    main()
