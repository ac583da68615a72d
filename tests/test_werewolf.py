"""Werewolf: the rules with scripted decisions (dealing, lenient parsing, kills, potions, votes, winners),
whole games driven by scripted players (a coordinated good side, nothing but illegal replies, a crash), the
constrained decisions (every kill, check, potion and vote offered exactly its valid choices; whole games on
the tiny random model without one invalid decision), and the example YAML training either side for 2 steps
on the tiny model by changing only trainable_target."""

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from sparring import ChatModel, ChatResponse, FrozenChatModel, ServiceClient
from sparring.envs import game_folder, load_game_config
from sparring.envs.werewolf import werewolf
from sparring.envs.werewolf.rules import (
    GOOD_GUY,
    WEREWOLF,
    GameState,
    parse_target,
    parse_witch,
    resolve_kill,
    resolve_night,
    resolve_vote,
    seer_fallback,
)
from sparring.logging import read_metrics
from sparring.trainer import run_training

NAMES = [f"Player{i}" for i in range(1, 8)]


@dataclass(eq=False)
class Scripted(ChatModel):
    """A player whose reply is `script(agent, request)`; every copy (as_agent) logs to the same `calls`."""

    script: Callable[[str, str], str]
    agent: str = "scripted"
    role: str | None = None
    calls: list[tuple[str, list[dict]]] = field(default_factory=list)
    choices: list[tuple[str, str, list[str] | None]] = field(default_factory=list)
    """(agent, request, the choices it was constrained to or None) per call."""

    async def __call__(self, messages, tools=None, **sampling):
        self.calls.append((self.agent, list(messages)))
        self.choices.append((self.agent, messages[-1]["content"], sampling.get("choices")))
        return ChatResponse(message={"role": "assistant", "content": self.script(self.agent, messages[-1]["content"])})


def play(seed, policy, participant, **workflow_args):
    return asyncio.run(
        werewolf(
            {"seed": seed, "task_id": f"t{seed}", "workflow_args": workflow_args}, policy, {"participant": participant}
        )
    )


def test_roles_are_dealt_from_the_seed():
    tables = [[p.role for p in GameState.deal(seed).players] for seed in range(20)]
    assert all(sorted(t) == sorted(["werewolf"] * 2 + ["villager"] * 3 + ["seer", "witch"]) for t in tables)
    assert tables[3] == [p.role for p in GameState.deal(3).players]
    assert len({tuple(t) for t in tables}) > 10


@pytest.mark.parametrize(
    "text, allowed, expected",
    [
        ("I vote for Player3.", NAMES, "Player3"),
        ("kill player 5 now", NAMES, "Player5"),
        ("P2", NAMES, "Player2"),
        ("On night 1 I pick Player4", NAMES, "Player4"),  # a named player beats a bare number
        ("6", NAMES, "Player6"),
        ("I am Player1 and I vote Player6", NAMES[1:], "Player6"),  # not allowed (self) is skipped
        ("Player9 or Player0", NAMES, None),
        ("the quiet one", NAMES, None),
        ("", NAMES, None),
    ],
)
def test_targets_are_read_leniently(text, allowed, expected):
    assert parse_target(text, allowed) == expected


def test_the_witch_is_read_leniently_and_only_offered_what_she_has():
    state = GameState.deal(0)
    assert parse_witch("SAVE!", "Player2", NAMES, state) == ("heal", None, True)
    assert parse_witch("I will poison player 4", "Player2", NAMES, state) == ("poison", "Player4", True)
    assert parse_witch("pass", "Player2", NAMES, state) == ("pass", None, True)
    assert parse_witch("hmm, the moon", "Player2", NAMES, state) == ("pass", None, False)
    state.heal_available = state.poison_available = False
    assert parse_witch("save them", "Player2", NAMES, state)[0] == "pass"
    assert parse_witch("poison Player4", "Player2", NAMES, state)[0] == "pass"


def test_kills_votes_and_potions_resolve_by_the_rules():
    state = GameState.deal(0)
    wolves = [p.name for p in state.living(side=WEREWOLF)]
    good = [p.name for p in state.living(side=GOOD_GUY)]
    assert resolve_kill(state, [good[0], good[0]]) == good[0]
    assert resolve_kill(state, [good[0], good[1]]) in good[:2]  # a tie is drawn by lot
    assert (
        resolve_kill(state, [None, wolves[0]]) in good
    )  # no readable proposal (a wolf is no target): random good player
    assert resolve_night(state, good[0], "heal", None) == [] and not state.heal_available
    assert resolve_night(state, good[0], "poison", wolves[0]) == sorted([good[0], wolves[0]], key=NAMES.index)
    assert not state.poison_available and not state.player(wolves[0]).alive
    assert resolve_vote(state, {good[1]: good[2], good[2]: good[3], good[3]: None}) is None  # tie
    assert resolve_vote(state, {good[1]: None}) is None  # everyone abstained
    assert resolve_vote(state, {good[1]: wolves[1], good[2]: wolves[1], good[3]: good[2]}) == wolves[1]
    assert state.winner() == GOOD_GUY
    assert seer_fallback(state, good[1]) in [p.name for p in state.living()]


def test_the_werewolves_win_at_parity():
    state = GameState.deal(1)
    for player in state.living(side=GOOD_GUY)[:3]:
        player.alive = False
    assert state.winner() == WEREWOLF
    assert GameState.deal(1).winner() is None


def coordinated(seed):
    """Good players vote for the first living werewolf; werewolves kill and vote the first living good player."""
    table = {p.name: p.role for p in GameState.deal(seed).players}

    def script(agent, request):
        choices = request.rsplit("name: ", 1)[-1]
        living = [name for name in NAMES if name in choices]
        if "Speak briefly" in request:
            return f"I am {agent}; I suspect someone."
        if "was attacked" in request:
            return "PASS"
        wolves = [n for n in living if table[n] == "werewolf"]
        good = [n for n in living if table[n] != "werewolf"]
        return f"I choose {(good if table[agent] == 'werewolf' else wolves or good)[0]}."

    return script


def conversations(calls, agent):
    """An agent's calls split into conversations: a call that does not extend the previous one starts a new one."""
    found = []
    for messages in (messages for name, messages in calls if name == agent):
        previous = found[-1][-1] if found else None
        if (
            previous is not None
            and messages[: len(previous)] == previous
            and messages[len(previous)]["role"] == "assistant"
        ):
            found[-1].append(messages)
        else:
            found.append([messages])
    return found


@pytest.mark.parametrize("target, full_history", [(WEREWOLF, False), (GOOD_GUY, False), (GOOD_GUY, True)])
def test_a_coordinated_good_side_wins_and_only_the_trained_side_is_rewarded(target, full_history):
    seed = 4
    roles = {p.name: p.role for p in GameState.deal(seed).players}
    script = coordinated(seed)
    policy, participant = Scripted(script), Scripted(script)
    output = play(seed, policy, participant, trainable_target=target, full_history=full_history)
    trained = {name for name, role in roles.items() if (role == "werewolf") == (target == WEREWOLF)}
    assert set(output.reward) == trained
    assert set(output.reward.values()) == {1.0 if target == GOOD_GUY else 0.0}
    metrics = output.metrics
    assert metrics["good_guy_win"] == 1.0 and metrics["rounds"] == 2 and metrics["invalid_action_rate"] == 0.0
    assert (
        metrics["role/seer/win_rate"] == 1.0 and metrics["role/werewolf/win_rate"] == 0.0 and metrics["broken"] == 0.0
    )
    assert {agent for agent, _ in policy.calls} <= trained and {agent for agent, _ in participant.calls}.isdisjoint(
        trained
    )
    counts = []
    for agent in trained:  # a player's calls extend its conversation: one merged sequence per round (or per game)
        found = conversations(policy.calls, agent)
        counts.append(len(found))
        assert found[0][0][0]["role"] == "system" and f"You are {agent}" in found[0][0][0]["content"]
        for later in found[1:]:  # a later round starts afresh from the public record
            assert later[0][:1] == found[0][0][:1] and later[0][1]["content"].startswith("So far: night 1: ")
    assert max(counts) == (1 if full_history else 2)


def test_vote_credit_rewards_exactly_the_werewolf_votes_that_match_the_mates():
    seed = 4
    wolves = [p.name for p in GameState.deal(seed).players if p.role == WEREWOLF]
    policy, participant = Scripted(coordinated(seed)), Scripted(coordinated(seed))
    output = play(seed, policy, participant, trainable_target=WEREWOLF, vote_credit=0.5)
    assert output.metrics["wolf_votes_matched"] == 1.0 and set(output.turn_rewards) == set(wolves)
    for (
        wolf
    ) in wolves:  # one turn reward per call: 0.5 on the day-1 vote (a werewolf is voted out that day), 0 on the rest
        requests = [request for agent, request, _ in policy.choices if agent == wolf]
        assert len(output.turn_rewards[wolf]) == len(requests) and requests[2].splitlines()[-1].startswith("Vote out")
        assert output.turn_rewards[wolf] == [0.0, 0.0, 0.5] + [0.0] * (len(requests) - 3)
    assert (
        play(seed, Scripted(coordinated(seed)), Scripted(coordinated(seed)), trainable_target=WEREWOLF).turn_rewards
        is None
    )

    def split(agent, request):  # werewolves vote different good players: no day is matched, nothing credited
        choice = coordinated(seed)(agent, request)
        return "skip" if agent == wolves[1] and request.splitlines()[-1].startswith("Vote out") else choice

    apart = play(seed, Scripted(split), Scripted(coordinated(seed)), trainable_target=WEREWOLF, vote_credit=0.5)
    assert apart.metrics["wolf_votes_matched"] == 0.0 and all(
        set(rewards) == {0.0} for rewards in apart.turn_rewards.values()
    )


def test_elimination_credit_rewards_the_werewolf_votes_that_name_the_good_player_voted_out():
    seed = 4
    table = {p.name: p.role for p in GameState.deal(seed).players}
    wolves = [name for name, role in table.items() if role == WEREWOLF]

    def crowd(agent, request):  # everyone votes the first living good player they may name
        if not request.splitlines()[-1].startswith("Vote out"):
            return coordinated(seed)(agent, request)
        return (
            "I choose "
            f"{next(name for name in NAMES if name in request.rsplit('name: ', 1)[-1] and table[name] != WEREWOLF)}."
        )

    output = play(seed, Scripted(crowd), Scripted(crowd), trainable_target=WEREWOLF, elimination_credit=0.5)
    assert output.metrics["werewolf_win"] == 1.0 and output.metrics["wolf_votes_eliminating"] == 1.0
    for wolf in wolves:  # the day-1 vote (night kill, speech, vote) put a good player out; no vote_credit asked for
        assert output.turn_rewards[wolf][:3] == [0.0, 0.0, 0.5] and sum(output.turn_rewards[wolf]) == 0.5
    voted_out_wolf = play(
        seed,
        Scripted(coordinated(seed)),
        Scripted(coordinated(seed)),
        trainable_target=WEREWOLF,
        elimination_credit=0.5,
    )
    assert voted_out_wolf.metrics["wolf_votes_eliminating"] == 0.0 and all(
        set(r) == {0.0} for r in voted_out_wolf.turn_rewards.values()
    )


def test_with_train_speech_false_the_participant_makes_the_trained_sides_speeches_and_only_decisions_are_trainable():
    seed = 4
    wolves = [p.name for p in GameState.deal(seed).players if p.role == WEREWOLF]
    policy, participant = Scripted(coordinated(seed)), Scripted(coordinated(seed))
    output = play(
        seed, policy, participant, trainable_target=WEREWOLF, vote_credit=0.5, full_history=True, train_speech=False
    )
    assert policy.choices and all(choices is not None for _, _, choices in policy.choices)  # decisions only
    speeches = [agent for agent, request, _ in participant.choices if "Speak briefly" in request]
    assert set(wolves) <= set(speeches)
    for wolf in wolves:  # one turn reward per call of the policy; the vote credit on the day-1 vote (its 2nd decision)
        assert output.turn_rewards[wolf] == [0.0, 0.5] + [0.0] * (sum(agent == wolf for agent, _ in policy.calls) - 2)
        seen = next(messages for agent, messages in policy.calls if agent == wolf and len(messages) > 5)
        assert seen[4]["role"] == "assistant" and seen[4]["content"].startswith(f"I am {wolf}")  # it sees its speech
    assert (
        output.metrics
        == play(
            seed,
            Scripted(coordinated(seed)),
            Scripted(coordinated(seed)),
            trainable_target=WEREWOLF,
            vote_credit=0.5,
            full_history=True,
        ).metrics
    )


def test_only_illegal_replies_fall_back_by_rule_and_werewolves_win_on_night_three_unless_the_limit_comes_first():
    nonsense = Scripted(lambda agent, request: "I like turtles.")
    output = play(7, nonsense, nonsense, trainable_target=WEREWOLF)
    metrics = output.metrics
    assert metrics["invalid_action_rate"] == 1.0 and metrics["invalid_action_rate_trained"] == 1.0
    assert (
        metrics["werewolf_win"] == 1.0 and metrics["rounds"] == 3
    )  # random kills, abstained votes: 5 -> 4 -> 3 -> 2 good
    assert set(output.reward.values()) == {1.0}
    days = [messages[-1]["content"] for _, messages in nonsense.calls if "Votes:" in messages[-1]["content"]]
    assert days and all("Nobody was eliminated" in day for day in days)
    short = play(7, nonsense, nonsense, trainable_target=GOOD_GUY, max_rounds=2)  # the village survives the round limit
    assert (
        short.metrics["survived_round_limit"] == 1.0
        and short.metrics["good_guy_win"] == 1.0
        and set(short.reward.values()) == {1.0}
    )


def test_the_witch_can_poison_a_werewolf_and_everyone_hears_of_the_deaths():
    seed = 2
    roles = {p.name: p.role for p in GameState.deal(seed).players}
    first_wolf = next(name for name, role in roles.items() if role == "werewolf")
    witch = next(name for name, role in roles.items() if role == "witch")
    calls = []

    def script(agent, request):
        calls.append((agent, request))
        if agent == witch and "was attacked" in request:
            return f"POISON {first_wolf}"
        return "..."

    output = play(seed, Scripted(script), Scripted(script), max_rounds=1)
    dawn = next(request for agent, request in calls if "Night 1 is over" in request)
    assert first_wolf in dawn.split("Night 1 is over:")[1].split("\n")[0] and output.metrics["rounds"] == 1


def test_every_decision_is_offered_exactly_its_valid_choices_and_speeches_stay_free():
    seed = 3
    roles = {p.name: p.role for p in GameState.deal(seed).players}
    witch = next(name for name, role in roles.items() if role == "witch")

    def first_choice(agent, request):
        if "Vote out" in request or "was attacked" in request:
            return "skip" if "Vote out" in request else "PASS"
        return request.rsplit("name: ", 1)[-1].split(",")[0]

    recorder = Scripted(first_choice)
    output = play(seed, recorder, recorder, max_rounds=1)
    good = sorted(name for name, role in roles.items() if role != "werewolf")
    asked = {"kill": [], "check": [], "witch": [], "vote": [], "speech": []}
    for agent, request, choices in recorder.choices:
        last = request.splitlines()[-1]
        kind = next(
            k
            for k, marker in (
                ("kill", "Who do you kill"),
                ("check", "Whose role"),
                ("witch", "was attacked"),
                ("vote", "Vote out"),
                ("speech", "Speak briefly"),
            )
            if marker in last
        )
        asked[kind].append((agent, choices))
    assert (
        all(choices == good for _, choices in asked["kill"]) and len(asked["kill"]) == 2
    )  # a kill: a living good player
    assert all(choices == [n for n in NAMES if n != agent] for agent, choices in asked["check"])
    assert asked["witch"] == [(witch, ["PASS", "SAVE", *(f"POISON {n}" for n in NAMES if n != witch)])]
    for agent, choices in asked[
        "vote"
    ]:  # a vote: another living player (both werewolves killed good[0], the witch passed), or skip
        assert choices == [n for n in NAMES if n != agent and n != good[0]] + ["skip"]
    assert asked["speech"] and all(choices is None for _, choices in asked["speech"])
    assert output.metrics["invalid_action_rate"] == 0.0  # skip is an allowed abstention, not an invalid vote


@pytest.mark.parametrize("target", [WEREWOLF, GOOD_GUY])
def test_no_decision_of_the_tiny_random_model_can_be_invalid(tiny_model_dir, target):
    sampler = ServiceClient().create_sampling_client(base_model=str(tiny_model_dir))
    model = FrozenChatModel(sampler, defaults={"temperature": 1.0})
    outputs = [play(seed, model, model, trainable_target=target, max_rounds=2, speech_tokens=3) for seed in range(4)]
    assert all(o.metrics["broken"] == 0.0 for o in outputs)
    assert all(o.metrics["invalid_action_rate"] == 0.0 for o in outputs)  # the random model names no one unconstrained


def test_a_game_that_cannot_continue_scores_the_penalty():
    def script(agent, request):
        if "Speak briefly" in request:
            raise RuntimeError("the model server went away")
        return "Player1"

    output = play(0, Scripted(script), Scripted(script), trainable_target=GOOD_GUY)
    assert set(output.reward.values()) == {-0.1} and len(output.reward) == 5
    assert output.metrics["broken"] == 1.0 and output.metrics["trained_win"] == 0.0


def test_bad_arguments_are_clear_errors():
    quiet = Scripted(lambda agent, request: "")
    with pytest.raises(ValueError, match="trainable_target"):
        play(0, quiet, quiet, trainable_target="villager")
    with pytest.raises(KeyError, match="participant"):
        asyncio.run(werewolf({"seed": 0}, quiet, {}))


@pytest.mark.parametrize("target, train_speech", [(WEREWOLF, False), (GOOD_GUY, True)])
def test_the_example_config_trains_either_side_by_changing_trainable_target(
    tiny_model_dir, tmp_path, target, train_speech
):
    config = load_game_config(
        "werewolf",
        [
            f"model.model_path={tiny_model_dir}",
            f"auxiliary_models.participant.model_path={tiny_model_dir}",
            "model.lora_rank=4",
            "train_dataset.total_steps=2",
            "algorithm.group_size=2",
            "algorithm.batch_size=1",
            "algorithm.drop_zero_variance_groups=false",
            # the tiny model's games often all end alike: this checks the plumbing
            "algorithm.allow_nothing_trained=true",
            "checkpoints.interval_steps=0",
            "evaluation.max_tasks=1",  # the held-out game only has to run: this test reads the training steps
            f"run_dir={tmp_path / 'run'}",
            "logging.tensorboard=false",
            "logging.console=false",
            f"train_dataset.workflow_args.trainable_target={target}",
            "train_dataset.workflow_args.max_rounds=2",
            "train_dataset.workflow_args.speech_tokens=4",
            # false: speeches on the participant, decisions trained
            f"train_dataset.workflow_args.train_speech={str(train_speech).lower()}",
        ],
    )
    assert config.eval_dataset.workflow_args["trainable_target"] == target  # train and eval share one YAML anchor
    result = run_training(config)
    assert result.steps == 2
    metrics = read_metrics(tmp_path / "run")
    seeds = [json.loads(line)["seed"] for line in (game_folder("werewolf") / "data" / "train.jsonl").open()]
    trained_roles = {"werewolf"} if target == WEREWOLF else {"villager", "seer", "witch"}
    trained_names = {p.name for seed in seeds for p in GameState.deal(seed).players if p.role in trained_roles}
    for row in [
        row for row in metrics if "reward/mean" in row
    ]:  # the training steps (not the evaluations before and after)
        agents = {key.split("/")[1] for key in row if key.startswith("agent/")}
        roles = {key.split("/")[1] for key in row if key.startswith("role/") and key.endswith("/reward")}
        assert agents and agents <= trained_names and roles and roles <= trained_roles
        assert (
            row["episode/error_rate"] == 0.0
            and row["workflow/broken"] == 0.0
            and 0.0 <= row["workflow/invalid_action_rate"] <= 1.0
        )
        assert "role/werewolf/win_rate" in row and row["train/datums"] > 0
