"""Twenty questions: word list and split, the referee (guess / question / invalid), answer parsing, scoring,
scripted games (including illegal replies and a garbled answerer), the constrained answerer and final guess
(`choices=`, checked on the tiny model too), and 2 training steps on the tiny model."""

import json
from dataclasses import dataclass, field

import pytest

from sparring import (
    AlgorithmConfig,
    ChatModel,
    ChatResponse,
    DatasetConfig,
    FrozenChatModel,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerModelConfig,
    tune,
)
from sparring.envs import game_folder
from sparring.envs.twenty_questions import make_tasks, twenty_questions
from sparring.envs.twenty_questions.rules import answerer_prompt, classify, load_words, normalise_answer, vocabulary
from sparring.logging import read_metrics


@dataclass(eq=False)
class Scripted(ChatModel):
    """Replies from a fixed list, in order; remembers what it was asked."""

    replies: list[str]
    agent: str = "scripted"
    role: str | None = None
    asked: list[list[dict]] = field(default_factory=list)
    sampling: list[dict] = field(default_factory=list)

    async def __call__(self, messages, tools=None, **sampling):
        self.asked.append(list(messages))
        self.sampling.append(sampling)
        return ChatResponse(
            message={"role": "assistant", "content": self.replies[(len(self.asked) - 1) % len(self.replies)]}
        )


def play(replies, answers=("Yes",), word="cat", **workflow_args):
    import asyncio

    player, answerer = Scripted(list(replies)), Scripted(list(answers))
    output = asyncio.run(
        twenty_questions({"word": word, "workflow_args": workflow_args}, player, {"answerer": answerer})
    )
    return output, player, answerer


def test_the_packaged_words_have_a_fixed_disjoint_split():
    train, held_out = load_words("train"), load_words("eval")
    assert len(train) == 200 and len(held_out) == 100
    assert len(set(train)) == 200 and not set(train) & set(held_out)
    assert "cat" in train and "panda" in held_out
    with pytest.raises(ValueError, match="split"):
        load_words("test")


def test_example_task_files_use_their_split_and_cover_it():
    for split, passes in (("train", 1), ("eval", 2)):  # the 100 held-out words twice: 200 held-out games
        rows = [
            json.loads(line)
            for line in (game_folder("twenty_questions") / "data" / f"{split}.jsonl").read_text().splitlines()
        ]
        assert rows == make_tasks(split, len(load_words(split)) * passes, seed=1 if split == "train" else 2)
        assert sorted(row["word"] for row in rows) == sorted(load_words(split) * passes)


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Is it a cat?", ("guess", "cat")),
        ("Guess: Cats", ("guess", "cat")),
        ("My answer is the dog.", ("guess", "dog")),
        ("cat.", ("guess", "cat")),
        ("Is it an animal?", ("question", None)),
        ("Is it bigger than a cat?", ("question", None)),
        ("Does it live in the ocean", ("question", None)),
        ("Hello! I love this game.", ("invalid", None)),
        ("", ("invalid", None)),
    ],
)
def test_the_referee_reads_guesses_questions_and_nonsense(reply, expected):
    assert classify(reply, vocabulary()) == expected


@pytest.mark.parametrize(
    "text, answer",
    [
        ("Yes.", "Yes"),
        (" yes!!", "Yes"),
        ("Nope, it isn't", "No"),
        ("NO", "No"),
        ("I am not sure", "Unknown"),
        ("", "Unknown"),
    ],
)
def test_answers_are_normalised_leniently(text, answer):
    assert normalise_answer(text) == answer


@pytest.mark.parametrize(
    "secret, question, prompt",
    [
        ("panda", "Is it an animal?", "Is a panda an animal? Answer Yes or No."),
        ("otter", "It lives in water?", "An otter lives in water? Answer Yes or No."),
        ("harp", "Is the secret word one of these: harp, sun?", "Is a harp one of these: harp, sun? Answer Yes or No."),
        ("mug", "Does a bird fly?", "About a mug: Does a bird fly? Answer Yes or No."),
    ],
)
def test_the_answerer_is_asked_about_the_secret_word_by_name(secret, question, prompt):
    assert answerer_prompt(secret, question) == prompt


def test_a_correct_guess_wins_and_fewer_questions_score_more():
    output, player, answerer = play(["Is it an animal?", "Is it a dog?", "Is it a cat?"], max_questions=5)
    metrics = output.metrics
    assert (
        metrics["success"] == 1.0
        and metrics["questions"] == 3
        and metrics["wrong_guesses"] == 1
        and metrics["valid_questions"] == 1
    )
    assert output.reward == pytest.approx(1.0 + 0.5 * 2 / 5 + 0.1 * 1 / 5)
    assert len(answerer.asked) == 1  # guesses are refereed in Python, not by the answerer
    assert answerer.asked[0] == [{"role": "user", "content": "Is a cat an animal? Answer Yes or No."}]
    # every turn continues the player's one conversation (so the game trains as one merged sequence)
    for before, after in zip(player.asked, player.asked[1:], strict=False):
        assert after[: len(before)] == before and after[len(before)]["role"] == "assistant"
    assert player.asked[1][-1]["content"] == "Yes. 4 questions left."
    quick, _, _ = play(["Is it a cat?"], max_questions=5)
    assert quick.reward > output.reward


def test_guess_bonus_pays_once_for_each_shown_candidate_a_wrong_guess_rules_out():
    _, player, _ = play(["Is it big?"], word="panda", candidates=4, max_questions=1)
    shown = player.asked[0][1]["content"].split("It is one of: ")[1].split(".")[0].split(", ")
    wrong = [word for word in shown if word != "panda"]
    replies = [
        f"Is it a {wrong[0]}?",
        f"Is it a {wrong[0]}?",
        "Is it a zebra?" if "zebra" not in shown else "Is it a cat?",
        f"Is it a {wrong[1]}?",
        "Is it a panda?",
    ]
    output, _, _ = play(replies, word="panda", candidates=4, max_questions=6, guess_bonus=0.3)
    assert (
        output.metrics["candidates_ruled_out"] == 2 and output.metrics["success"] == 1.0
    )  # a repeat and a word not shown: nothing
    assert output.reward == pytest.approx(1.0 + 0.5 * 1 / 6 + 0.3 * 2 / 6)
    plain, _, _ = play(replies, word="panda", candidates=4, max_questions=6)
    assert plain.reward == pytest.approx(1.0 + 0.5 * 1 / 6) and plain.metrics["candidates_ruled_out"] == 2


def test_illegal_replies_are_invalid_actions_and_never_reach_the_answerer():
    output, player, answerer = play(["Hello there.", "blah"], max_questions=4)
    assert output.metrics["invalid_action_rate"] == 1.0 and output.metrics["success"] == 0.0
    assert (
        output.reward == 0.0 and len(player.asked) == 4 + 1 and answerer.asked == []
    )  # 4 questions, then the final guess
    assert "not a yes/no question" in player.asked[1][-1]["content"]


def test_the_answerer_may_only_say_yes_or_no_and_the_final_guess_only_name_a_candidate():
    output, player, answerer = play(
        ["Is it an animal?", "Is it small?", "panda"], answers=["No"], word="panda", candidates=4, max_questions=2
    )
    shown = player.asked[0][1]["content"].split("It is one of: ")[1].split(".")[0].split(", ")
    assert all(call == {"choices": ["yes", "no"], "max_tokens": 4} for call in answerer.sampling)
    assert player.sampling[:2] == [{}, {}]  # questions stay free text
    assert player.sampling[2]["choices"] == shown  # the final guess: exactly the candidates shown
    assert (
        player.asked[2][-1]["content"]
        == f"No. No questions left. Which word is it? Reply with one of: {', '.join(shown)}."
    )
    assert (
        output.metrics["success"] == 1.0
        and output.metrics["solved_before_final_guess"] == 0.0
        and output.metrics["questions"] == 2
    )
    assert output.reward == pytest.approx(
        1.0 + 0.1
    )  # solved after every question: no speed bonus; shaping for 2 questions
    classic, player, _ = play(["Is it big?", "cat"], max_questions=1)
    assert player.sampling[1]["choices"] == sorted(vocabulary()) and classic.metrics["success"] == 1.0


def test_a_solved_game_asks_for_no_final_guess_and_a_wrong_final_guess_loses():
    _, player, _ = play(["Is it a cat?"], max_questions=3)
    assert len(player.asked) == 1
    output, player, _ = play(["Is it a dog?", "dog"], max_questions=1)
    assert len(player.asked) == 2 and output.metrics["success"] == 0.0 and output.metrics["wrong_guesses"] == 2


def test_on_the_tiny_model_every_answer_is_yes_or_no_and_every_final_guess_a_candidate(tiny_model_dir):
    import asyncio

    sampler = ServiceClient().create_sampling_client(base_model=str(tiny_model_dir))
    frozen = FrozenChatModel(sampler, defaults={"temperature": 1.0, "max_tokens": 6})
    words = list(load_words("eval")[:6])
    outputs = [
        asyncio.run(
            twenty_questions(
                {"word": word, "seed": i, "workflow_args": {"max_questions": 2, "candidates": 4}},
                frozen,
                {"answerer": frozen},
            )
        )
        for i, word in enumerate(words)
    ]
    assert all(
        answer in ("Yes", "No", None) for o in outputs for _, answer in o.response
    )  # None: an invalid question, never asked
    assert all(
        o.response[-1][0].strip().lower() in load_words("eval")
        for o in outputs
        if o.metrics["solved_before_final_guess"] == 0.0
    )


def test_a_garbled_answerer_reads_as_unknown_and_running_out_of_questions_loses():
    output, player, _ = play(["Is it big?"], answers=["Purple monkey"], max_questions=3)
    assert output.metrics["unknown_answer_rate"] == 1.0 and output.metrics["success"] == 0.0
    assert output.reward == pytest.approx(0.1)  # only the shaping for three valid questions
    assert player.asked[-2][-1]["content"] == "I don't know. 1 question left."


def test_candidates_list_the_secret_among_words_of_its_split():
    _, player, _ = play(["Is it a cat?"], word="panda", candidates=6, max_questions=2)
    prompt = player.asked[0][1]["content"]
    shown = prompt.split("It is one of: ")[1].split(".")[0].split(", ")
    assert len(shown) == 6 and "panda" in shown and set(shown) <= set(load_words("eval"))
    again = play(["Is it a cat?"], word="panda", candidates=6, max_questions=2)[1].asked[0][1]["content"]
    assert again == prompt  # the same task shows the same candidates


def test_a_missing_answerer_is_a_clear_error():
    import asyncio

    with pytest.raises(KeyError, match="answerer"):
        asyncio.run(twenty_questions({"word": "cat"}, Scripted(["?"]), {}))


def test_two_training_steps_on_the_tiny_model(tiny_model_dir, tmp_path):
    tiny = TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=8, lora_rank=4)
    result = tune(
        workflow_func=twenty_questions,
        train_dataset=DatasetConfig(
            tasks=make_tasks("train", 4, seed=0), total_steps=2, workflow_args={"max_questions": 3, "candidates": 4}
        ),
        model=tiny,
        auxiliary_models={"answerer": TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=3)},
        algorithm=AlgorithmConfig(group_size=2, batch_size=2, learning_rate=1e-3, drop_zero_variance_groups=False),
        runner=RunnerConfig(episode_timeout_s=120),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    assert result.steps == 2
    metrics = read_metrics(tmp_path / "run")
    assert metrics[-1]["episode/error_rate"] == 0.0 and metrics[-1]["train/datums"] > 0
    assert {"workflow/success", "workflow/questions", "workflow/invalid_action_rate", "agent/policy/reward"} <= set(
        metrics[-1]
    )
