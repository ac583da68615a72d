"""A supervised warm start: cross-entropy steps on worked examples before a run's first RL step.

Some skills come slowly from rewards and fast from answers. On tic-tac-toe, 80 steps of the league's games left the
policy finding a winning or blocking move about half the time, where the same minutes of cross-entropy on the
solver's moves reached 0.71 on unseen positions (docs/results.md). `warm_start:` (`warm_start_config.py`) gives a
run such answers first: `steps` optimizer steps of cross-entropy on the assistant replies of chat examples, through
the training client RL then continues with, on a fresh optimizer (the weights reloaded without Adam's moments).
`supervised_datum` makes an example a Tinker `Datum`: the chat rendered as the policy sees it, the reply's tokens
and its end-of-turn token as targets. It runs
on a new run only (a resumed run's checkpoint holds its result; a stop signal during it ends the run with a
checkpoint of the weights taught so far, which a resume does not teach again); its losses are logged at step 0.
"""

from __future__ import annotations

import asyncio
import math
import time

from ..logging import TrainingProgress
from ..models.renderer import ChatRenderer, get_renderer
from ..types import AdamParams, Datum, ModelInput
from .dataset import DatasetError, TaskStream, load_tasks
from .models import TrainingModels
from .stop_signals import StopSignals
from .warm_start_config import WarmStartConfig

WARM_STARTED = "warm-started"
"""The name its weights are saved under (`save_state`) before RL reloads them with a fresh optimizer."""
REPORT_EVERY_STEPS = 25
"""Console lines while it runs: one every this many steps, with the mean loss of the steps since the last line."""


def supervised_datum(renderer: ChatRenderer, example: dict, where: str) -> Datum:
    """The example's chat up to its last message as the prompt, that assistant reply (and its end-of-turn token) as
    the weighted targets."""
    messages = example.get("messages")
    if (
        not isinstance(messages, list)
        or len(messages) < 2
        or not all(isinstance(m, dict) for m in messages)
        or messages[-1].get("role") != "assistant"
    ):
        raise DatasetError(
            f"{where}: a warm-start example needs `messages`, a chat ending in the assistant reply to learn"
        )
    reply = messages[-1].get("content")
    weight = example.get("weight", 1.0)
    if not isinstance(reply, str) or not reply:
        raise DatasetError(f"{where}: the last message's content must be the reply's text, got {reply!r}")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise DatasetError(f"{where}: weight must be a positive number, got {weight!r}")
    return weighted_datum(
        renderer.render(messages[:-1]), renderer.encode_text(reply) + renderer.stop_token_ids[:1], float(weight)
    )


def weighted_datum(prompt: list[int], reply: list[int], weight: float) -> Datum:
    """A cross-entropy datum: `prompt` then `reply`, the reply's tokens the targets, each weighted `weight`."""
    tokens = prompt + reply
    weights = [0.0] * (len(prompt) - 1) + [weight] * len(reply)
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights}
    )


async def warm_start(
    config: WarmStartConfig, models: TrainingModels, progress: TrainingProgress, stop: StopSignals
) -> dict[str, float]:
    """Run the supervised steps; returns their metrics (loss per weighted target token: the first step's, and the
    mean of the last REPORT_EVERY_STEPS steps')."""
    started = time.perf_counter()
    key = config.model_key(list(models.clients))
    client, adam_params = models.clients[key], AdamParams(learning_rate=config.learning_rate)
    renderer = get_renderer(client.get_tokenizer())
    examples = load_tasks(config.dataset)
    data = [
        supervised_datum(renderer, example, f"warm_start.dataset: row {index}")
        for index, example in enumerate(examples)
    ]
    target_weights = [sum(datum.loss_fn_inputs["weights"].tolist()) for datum in data]
    batches = TaskStream(
        [{"row": index} for index in range(len(data))],
        config.batch_size,
        total_steps=config.steps,
        shuffle=config.dataset.shuffle,
        seed=config.dataset.seed,
    )
    losses, step_activity = [], progress.activity
    for step, rows in enumerate(batches):
        stop.check()  # a stop signal ends the run here, its checkpoint holding the weights taught so far
        progress.activity = f"warm start {step + 1}/{config.steps}"  # what the console's heartbeat names
        picked = [row["row"] for row in rows]
        batch = [data[index] for index in picked]
        output, _ = await asyncio.gather(
            client.forward_backward(batch, "cross_entropy", None), client.optim_step(adam_params)
        )
        losses.append(output.loss / sum(target_weights[index] for index in picked))
        if progress.enabled and ((step + 1) % REPORT_EVERY_STEPS == 0 or step + 1 == config.steps):
            progress.line(
                f"warm start {step + 1}/{config.steps}: loss per target token {_recent(losses):.3f} (mean "
                f"of the last {REPORT_EVERY_STEPS} steps)"
            )
    progress.activity = step_activity
    # RL starts with a fresh optimizer: Adam's moments, scaled to the supervised gradients, would shrink its updates
    # to nothing for the first RL steps.
    saved = await client.save_state(WARM_STARTED)
    await client.load_weights(saved.path)
    return {
        "warm_start/steps": float(config.steps),
        "warm_start/loss_first": losses[0],
        "warm_start/loss_last": _recent(losses),
        "warm_start/examples": float(len(data)),
        "time/warm_start": time.perf_counter() - started,
    }


def _recent(losses: list[float]) -> float:
    """The mean loss of the last REPORT_EVERY_STEPS steps (one batch's loss is noisy)."""
    recent = losses[-REPORT_EVERY_STEPS:]
    return sum(recent) / len(recent)
