"""Two debaters, one base model: multi-agent RL with the low-level training API.

The MinT / Tinker multi-agent recipe, run for real on a CPU: two LoRA
training clients share SmolLM2-135M-Instruct, each argues one side of a
topic, a frozen judge (the base model itself) picks the more convincing
argument, the winner gets +1 and the loser -0.5, and both adapters take a PPO
step on their own sampled tokens. Both adapters are saved at the end.

    python examples/two_debaters.py --epochs 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from sparring import ServiceClient, types

SCENARIOS = [
    {
        "topic": "Should AI be regulated?",
        "stances": ("Yes, AI needs safety oversight", "No, regulation stifles innovation"),
    },
    {
        "topic": "Is climate change urgent?",
        "stances": ("Yes, urgent action is needed now", "No, we have time to adapt"),
    },
]
WIN, LOSS = 1.0, -0.5


def debater_prompt(renderer, topic: str, stance: str) -> list[int]:
    messages = [
        {"role": "system", "content": "You are a debater. Give one short, convincing argument."},
        {
            "role": "user",
            "content": f"Topic: {topic}\nYour position: {stance}\nArgue for your position in two sentences.",
        },
    ]
    return renderer.render(messages)


async def judge_prefers_first(judge, renderer, topic: str, first: str, second: str) -> bool:
    """The frozen judge's log-odds of '1' over '2', asked in both orders so position bias cancels."""
    tokenizer = judge.get_tokenizer()
    answers = [tokenizer.encode(answer, add_special_tokens=False) for answer in ("1", "2")]

    async def log_odds_first_wins(a: str, b: str) -> float:
        question = (
            f"Topic: {topic}\n\nArgument 1: {a}\n\nArgument 2: {b}\n\nWhich argument is more convincing? Answer 1 or 2."
        )
        prompt = renderer.render([{"role": "user", "content": question}])
        scored = await asyncio.gather(
            *(judge.compute_logprobs(types.ModelInput.from_ints(prompt + answer)) for answer in answers)
        )
        return sum(scored[0][len(prompt) :]) - sum(scored[1][len(prompt) :])

    as_asked, swapped = await asyncio.gather(log_odds_first_wins(first, second), log_odds_first_wins(second, first))
    return as_asked - swapped >= 0


def ppo_datum(prompt: list[int], sequence: types.SampledSequence, advantage: float) -> types.Datum:
    tokens = prompt + sequence.tokens
    prompt_part = len(prompt) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * prompt_part + sequence.logprobs,
            "advantages": [0.0] * prompt_part + [advantage] * len(sequence.tokens),
        },
    )


async def debate_round(agents, samplers, judge, renderer, scenario, num_samples, max_tokens):
    """Both sides argue num_samples times; return each side's PPO data and win count."""
    prompts = [debater_prompt(renderer, scenario["topic"], stance) for stance in scenario["stances"]]
    params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0)
    responses = await asyncio.gather(
        *(
            sampler.sample(types.ModelInput.from_ints(p), num_samples, params)
            for sampler, p in zip(samplers, prompts, strict=True)
        )
    )
    texts = [[renderer.parse_response(seq.tokens)["content"] for seq in response.sequences] for response in responses]
    first_wins = await asyncio.gather(
        *(judge_prefers_first(judge, renderer, scenario["topic"], a, b) for a, b in zip(*texts, strict=True))
    )
    rewards = [[WIN if won else LOSS for won in first_wins], [LOSS if won else WIN for won in first_wins]]
    data, wins = [], []
    for side in range(2):
        baseline = statistics.fmean(rewards[side])
        data.append(
            [
                ppo_datum(prompts[side], seq, reward - baseline)
                for seq, reward in zip(responses[side].sequences, rewards[side], strict=True)
            ]
        )
        wins.append(sum(r == WIN for r in rewards[side]))
    return data, wins


async def train(
    epochs=3, num_samples=4, max_tokens=40, base_model="smollm2-135m-instruct", learning_rate=2e-4, base_dir=None
):
    service = ServiceClient(base_dir=base_dir)
    agents = [
        await service.create_lora_training_client_async(base_model=base_model, rank=16, seed=seed) for seed in (1, 2)
    ]
    renderer = agents[0].get_renderer()
    judge = service.create_sampling_client(base_model=base_model)
    adam = types.AdamParams(learning_rate=learning_rate)
    print(
        f"=== Two debaters on {base_model}: {epochs} epochs x {len(SCENARIOS)} topics x {num_samples} "
        "arguments per side ==="
    )
    history = []
    for epoch in range(epochs):
        started = time.perf_counter()
        samplers = [await agent.save_weights_and_get_sampling_client_async() for agent in agents]
        losses, wins = [[], []], [0, 0]
        for scenario in SCENARIOS:
            data, round_wins = await debate_round(agents, samplers, judge, renderer, scenario, num_samples, max_tokens)
            # Submit both agents' work before waiting on either: the engine runs them back to back.
            handles = [
                agent.forward_backward_async(side_data, loss_fn="ppo")
                for agent, side_data in zip(agents, data, strict=True)
            ]
            for side, handle in enumerate(handles):
                losses[side].append((await handle.result_async()).loss)
                wins[side] += round_wins[side]
            steps = [agent.optim_step_async(adam) for agent in agents]
            for step in steps:
                await step.result_async()
        games = len(SCENARIOS) * num_samples
        row = {
            "epoch": epoch,
            "loss": [statistics.fmean(side) for side in losses],
            "win_rate": [w / games for w in wins],
        }
        history.append(row)
        print(
            f"Epoch {epoch}: agent 1 loss={row['loss'][0]:+.4f} win rate={row['win_rate'][0]:.2f} | "
            f"agent 2 loss={row['loss'][1]:+.4f} win rate={row['win_rate'][1]:.2f} | "
            f"{time.perf_counter() - started:.1f}s"
        )
    saved = [agent.save_weights_for_sampler_async(name=f"agent-{i + 1}-v1") for i, agent in enumerate(agents)]
    paths = [(await handle.result_async()).path for handle in saved]
    print("Both agents saved:", *paths, sep="\n  ")
    return history, paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4, help="arguments per side per topic")
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--base-model", default="smollm2-135m-instruct")
    args = parser.parse_args()
    asyncio.run(train(args.epochs, args.samples, args.max_tokens, args.base_model))


if __name__ == "__main__":
    main()
