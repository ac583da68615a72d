"""AgentScope's tuner multi-agent tutorial (7-player werewolf) on sparring, for AgentScope 1.x and 2.x.

The tutorial's workflow and `tune()` call with its imports changed
(`from agentscope.tuner import ...` became `from sparring import ...`), and a
model and sizes that fit a CPU in `__main__`. The models the workflow receives
are AgentScope chat models (and sparring chat models), so they go straight
into the agents; the werewolves' calls are recorded and each werewolf's
turns merge into one training sequence.

`new_player` is the tutorial's agent for each major. With AgentScope 1.x it is
the tutorial's `ReActAgent(name=..., sys_prompt=..., model=...,
formatter=OpenAIChatFormatter())`. AgentScope 2.x renamed the agent to `Agent`
(`sys_prompt` to `system_prompt`) and moved the formatter from the agent to the
model: the models sparring hands the workflow carry an `OpenAIChatFormatter`
(sparring's `TimelineFormatter`, which also keeps the wall-clock time that 2.x
agents inject out of the prompt).

The tutorial leaves out `get_player_prompt(name)` and `werewolves_game(players,
roles) -> good_guy_win`; here a moderator runs `MAX_ROUNDS` rounds: at night
each werewolf names a victim, the seer checks a player, the witch may save the
victim once; by day the living players speak one line each and vote one
player out. The moderator's words and everyone's speeches reach the players as
user messages from "Moderator", so each agent's own replies are its only
assistant turns. A reply that names no valid player counts as the first valid
one, so any model (the tiny random one included) plays the game through.

    pip install 'sparring[agentscope]'     # AgentScope 2.x; 'sparring[agentscope1]' for 1.x
    mkdir -p data && for seed in $(seq 0 31); do echo "{\"seed\": $seed}"; done > data/train.jsonl
    python examples/agentscope_werewolf.py
"""

import re
from collections import Counter

import agentscope
import numpy as np
from agentscope.model import ChatModelBase

from sparring import WorkflowOutput  # was: from agentscope.tuner import WorkflowOutput

AGENTSCOPE1 = agentscope.__version__.startswith("1.")


def new_player(name: str, model: ChatModelBase):
    """The tutorial's agent: `ReActAgent` with an `OpenAIChatFormatter` (1.x), `Agent` (2.x)."""
    if AGENTSCOPE1:
        from agentscope.agent import ReActAgent
        from agentscope.formatter import OpenAIChatFormatter

        return ReActAgent(name=name, sys_prompt=get_player_prompt(name), model=model, formatter=OpenAIChatFormatter())
    from agentscope.agent import Agent

    return Agent(name=name, system_prompt=get_player_prompt(name), model=model)


MAX_ROUNDS = 2


def get_player_prompt(name: str) -> str:
    return (
        f"You are {name} in a game of werewolf with 7 players (2 werewolves, 3 villagers, a seer, a witch). "
        "The moderator tells you your role. Answer in one short sentence; name players as PlayerN."
    )


async def tell(player, text: str) -> None:
    """The moderator tells `player` something it does not answer."""
    if AGENTSCOPE1:
        from agentscope.message import Msg

        await player.observe(Msg("Moderator", text, "user"))
    else:
        from agentscope.message import UserMsg

        await player.observe(UserMsg(name="Moderator", content=text))


async def ask(player, text: str) -> str:
    """The moderator asks `player` and gets its reply's text."""
    if AGENTSCOPE1:
        from agentscope.message import Msg

        reply = await player(Msg("Moderator", text, "user"))
    else:
        from agentscope.message import UserMsg

        reply = await player.reply(UserMsg(name="Moderator", content=text))
    return reply.get_text_content() or ""


def named_player(reply: str, candidates: list[str]) -> str:
    """The first of `candidates` the reply names, else the first candidate."""
    for number in re.findall(r"Player\s*(\d+)", reply):
        if f"Player{number}" in candidates:
            return f"Player{number}"
    return candidates[0]


def others(alive: list[str], name: str) -> list[str]:
    return [other for other in alive if other != name]


async def werewolves_game(players: list, roles: list[str]) -> bool:
    """Play the game; True when the good side wins."""
    names = [player.name for player in players]
    role_of = dict(zip(names, roles, strict=True))
    by_name = dict(zip(names, players, strict=True))
    alive = list(names)
    potion = True
    for name in names:
        await tell(by_name[name], f"You are {name}; your role is {role_of[name]}.")
    for round_number in range(1, MAX_ROUNDS + 1):
        wolves = [name for name in alive if role_of[name] == "werewolf"]
        good = [name for name in alive if role_of[name] != "werewolf"]
        if not wolves or len(wolves) >= len(good):
            break
        choices = [
            named_player(
                await ask(by_name[wolf], f"Night {round_number}. Werewolves {wolves}: whom do you kill? {good}"), good
            )
            for wolf in wolves
        ]
        victim = Counter(choices).most_common(1)[0][0]
        for seer in [name for name in alive if role_of[name] == "seer"]:
            checked = named_player(
                await ask(by_name[seer], f"Whom do you check? {others(alive, seer)}"), others(alive, seer)
            )
            await tell(
                by_name[seer], f"{checked} is a {'werewolf' if role_of[checked] == 'werewolf' else 'good player'}."
            )
        for witch in [name for name in alive if role_of[name] == "witch" and potion]:
            if "yes" in (await ask(by_name[witch], f"{victim} was attacked. Save them? yes or no")).lower():
                victim, potion = None, False
        if victim is not None:
            alive.remove(victim)
        news = f"Day {round_number}: {victim or 'nobody'} died. Living: {alive}."
        for name in alive:
            speech = await ask(by_name[name], f"{news} Say one sentence.")
            for listener in alive:
                if listener != name:
                    await tell(by_name[listener], f"{name} says: {speech}")
        votes = Counter(
            [
                named_player(
                    await ask(by_name[name], f"Vote one player out: {others(alive, name)}"), others(alive, name)
                )
                for name in alive
            ]
        )
        (top, count), *rest = votes.most_common()
        if not rest or rest[0][1] < count:
            alive.remove(top)
    wolves = [name for name in alive if role_of[name] == "werewolf"]
    return not wolves or len(wolves) < len(alive) - len(wolves)


async def werewolf_workflow(
    task: dict,
    model: ChatModelBase,
    auxiliary_models: dict[str, ChatModelBase],
) -> WorkflowOutput:
    """Run a werewolf game and train the werewolf players (or the good guys: workflow_args.trainable_target)."""
    try:
        roles = ["werewolf"] * 2 + ["villager"] * 3 + ["seer", "witch"]
        np.random.seed(task["seed"])
        np.random.shuffle(roles)

        workflow_args = task.get("workflow_args", {})
        trainable_target = workflow_args.get("trainable_target", "werewolf")

        players = []
        for i, role in enumerate(roles):
            if trainable_target == "werewolf":
                use_trainable = role == "werewolf"
            else:  # trainable_target == "good_guy"
                use_trainable = role in ["villager", "seer", "witch"]
            agent = new_player(
                name=f"Player{i + 1}",
                model=model if use_trainable else auxiliary_models["participant"],
            )
            players.append(agent)

        good_guy_win = await werewolves_game(players, roles)
        trainable_won = good_guy_win if trainable_target == "good_guy" else not good_guy_win
        return WorkflowOutput(
            reward=1.0 if trainable_won else 0.0,
            metrics={"werewolf_win": float(not good_guy_win), "success": 1.0},
        )
    except Exception as e:
        # Assign a small penalty for errors instead of crashing
        print(f"Error during game execution: {e}")
        return WorkflowOutput(reward=-0.1, metrics={"success": 0.0, "error": 1.0})


if __name__ == "__main__":
    from sparring import AlgorithmConfig, DatasetConfig, TunerModelConfig, tune  # was: from agentscope.tuner import ...

    dataset = DatasetConfig(
        path="data",  # data/train.jsonl: {"seed": 0}, {"seed": 1}, ...
        split="train",
        workflow_args={"trainable_target": "werewolf"},  # or "good_guy"
    )
    # The trainable model (will be tuned), used by the werewolves; the tutorial's is Qwen/Qwen2.5-7B-Instruct.
    model = TunerModelConfig(model_path="smollm2-135m-instruct", max_model_len=8192)
    # Auxiliary models (frozen), used by the other players; the tutorial's is Qwen/Qwen3-30B-A3B-Instruct-2507.
    auxiliary_models = {"participant": TunerModelConfig(model_path="smollm2-135m-instruct", max_model_len=8192)}
    # The tutorial's group_size=32, batch_size=24 and learning_rate=1e-6 are for GPUs and a 7B model.
    algorithm = AlgorithmConfig(algorithm_type="multi_step_grpo", group_size=4, batch_size=2, learning_rate=1e-5)

    tune(
        workflow_func=werewolf_workflow,
        judge_func=None,  # reward computed directly in the workflow
        train_dataset=dataset,
        model=model,
        auxiliary_models=auxiliary_models,
        algorithm=algorithm,
    )
