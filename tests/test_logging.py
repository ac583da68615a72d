"""Run records: metrics.jsonl (and its resume truncation), TensorBoard/wandb mirrors, rollout dumps,
transcripts and console progress. Fast: the only model is the tiny tokenizer."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import math
import re
import sys
import time
import types

import pytest
from transformers import AutoTokenizer

import sparring.logging.metrics as metrics_module
import sparring.logging.progress as progress_module
from sparring.logging import (
    ConsoleProgress,
    MetricsLogger,
    RolloutWriter,
    TrainingProgress,
    format_transcript,
    mean_metrics,
    print_table,
    read_metrics,
    read_rollouts,
)
from sparring.rollout.types import Episode, Timeline


def test_the_package_does_not_shadow_stdlib_logging():
    assert metrics_module.logging is logging
    assert "sparring" not in logging.__file__


def test_metrics_jsonl_has_one_flushed_line_per_step(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as metrics_logger:
        metrics_logger.log(1, {"reward/mean": 0.5, "agent/alice/reward": 1.0, "time/rollout": 2})
        metrics_logger.log(2, {"reward/mean": math.nan, "tokens/trained": 128, "timeline/merge_rate": math.inf})
        lines = (tmp_path / "metrics.jsonl").read_text().splitlines()  # readable before close
    assert len(lines) == 2
    assert "NaN" not in lines[1] and "Infinity" not in lines[1]
    assert read_metrics(tmp_path) == [
        {"step": 1, "reward/mean": 0.5, "agent/alice/reward": 1.0, "time/rollout": 2},
        {"step": 2, "reward/mean": None, "tokens/trained": 128, "timeline/merge_rate": None},
    ]


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as metrics_logger:
        for step in range(1, 6):
            metrics_logger.log(step, {"reward/mean": step / 10})
    with (tmp_path / "metrics.jsonl").open("a") as file:
        file.write('{"step": 6, "reward/me')  # a crash mid-write
    with MetricsLogger(tmp_path, tensorboard=False, resume_from_step=3) as metrics_logger:
        metrics_logger.log(4, {"reward/mean": 0.9})
    assert [(record["step"], record["reward/mean"]) for record in read_metrics(tmp_path / "metrics.jsonl")] == [
        (1, 0.1),
        (2, 0.2),
        (3, 0.3),
        (4, 0.9),
    ]
    assert not list(tmp_path.glob(".metrics.jsonl.*")), "the atomic rewrite left a temporary file"


def test_appending_without_resume_keeps_earlier_steps(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as metrics_logger:
        metrics_logger.log(1, {"loss": 1.0})
    with MetricsLogger(tmp_path, tensorboard=False) as metrics_logger:
        metrics_logger.log(2, {"loss": 0.5})
    assert [record["step"] for record in read_metrics(tmp_path)] == [1, 2]


def test_console_prints_the_step(tmp_path, capsys):
    with MetricsLogger(tmp_path, tensorboard=False, console=True) as metrics_logger:
        metrics_logger.log(7, {"reward/mean": 0.25, "tokens/trained": 40})
    assert "step 7: reward/mean=0.25 tokens/trained=40" in capsys.readouterr().out


def test_mean_metrics_averages_each_key_over_the_dicts_that_have_it():
    per_episode = [{"score": 1.0, "turns": 4}, {"score": 0.0}, {"score": 0.5, "turns": 6, "skipped": None}]
    assert mean_metrics(per_episode) == {"score": 0.5, "turns": 5.0}
    assert mean_metrics(per_episode, prefix="workflow/") == {"workflow/score": 0.5, "workflow/turns": 5.0}
    assert mean_metrics([]) == {}


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_events_file_is_written(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=True) as metrics_logger:
        metrics_logger.log(1, {"reward/mean": 0.5})
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_missing_tensorboard_is_skipped_with_one_log_line(tmp_path, caplog, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "tensorboard" else find_spec(name, *rest)
    )
    with caplog.at_level(logging.INFO, logger="sparring.logging.metrics"):
        with MetricsLogger(tmp_path, tensorboard=True) as metrics_logger:
            metrics_logger.log(1, {"reward/mean": 0.5})
            metrics_logger.log(2, {"reward/mean": 0.6})
    found = [record for record in caplog.records if "tensorboard" in record.message.lower()]
    assert [record.message for record in found] == [
        "logging.tensorboard is on but tensorboard is not installed, so no TensorBoard files are written "
        "(metrics.jsonl and report.html have every metric); pip install tensorboard, or set logging.tensorboard: false"
    ]
    assert found[0].levelno == logging.WARNING, "shown on the console (the CLI shows warnings), not hidden at INFO"
    assert not (tmp_path / "tensorboard").exists()


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_missing_wandb_is_one_warning_line_and_training_logs_on(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="sparring.logging.metrics"):
        with MetricsLogger(tmp_path, tensorboard=False, wandb_project="demo") as metrics_logger:
            metrics_logger.log(1, {"reward/mean": 0.5})
    found = [record for record in caplog.records if "wandb" in record.message]
    assert [(record.levelno, record.message) for record in found] == [
        (
            logging.WARNING,
            "logging.wandb_project='demo' is set but wandb is not installed, so nothing goes to wandb; pip "
            "install wandb",
        )
    ]
    assert read_metrics(tmp_path)[0]["reward/mean"] == 0.5


class _FakeWandbRun:
    def __init__(self, run_id):
        self.id = run_id
        self.logged = []
        self.finished = False

    def log(self, metrics, step):
        self.logged.append((step, metrics))

    def finish(self):
        self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", loader=None)
    module.init_calls = []

    def init(**kwargs):
        module.init_calls.append(kwargs)
        module.run = _FakeWandbRun(kwargs["id"] or "run-1")
        return module.run

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_wandb_gets_numeric_scalars_and_resumes_the_same_run(tmp_path, fake_wandb):
    with MetricsLogger(tmp_path, tensorboard=False, wandb_project="demo", config={"lr": 1e-4}) as metrics_logger:
        metrics_logger.log(1, {"reward/mean": 0.5, "reward/std": math.nan})
    first_run = fake_wandb.run
    assert first_run.logged == [(1, {"reward/mean": 0.5})] and first_run.finished
    assert fake_wandb.init_calls[0]["project"] == "demo" and fake_wandb.init_calls[0]["config"] == {"lr": 1e-4}
    with MetricsLogger(tmp_path, tensorboard=False, wandb_project="demo", resume_from_step=1):
        pass
    assert fake_wandb.init_calls[1]["id"] == "run-1"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from sparring.models import build_tiny_model

    return AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny"))


def _two_call_episode(tokenizer) -> Episode:
    """Alice's two calls merged into one timeline: prompt, completion, next prompt part, completion."""
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    parts = [
        (encode("<|im_start|>user\nPick a number<|im_end|>\n<|im_start|>assistant\n"), 0),
        (encode("Is it 42?<|im_end|>"), 1),
        (encode("\n<|im_start|>user\nHigher<|im_end|>\n<|im_start|>assistant\n"), 0),
        (encode("Is it 73?<|im_end|>"), 1),
    ]
    tokens = [token for part, _ in parts for token in part]
    loss_mask = [bit for part, bit in parts for _ in part]
    logprobs = [-0.5 if bit else 0.0 for bit in loss_mask]
    transcripts = {
        "alice": [
            {
                "messages": [{"role": "user", "content": "Pick a number"}],
                "response": {"role": "assistant", "content": "Is it 42?"},
                "trainable": True,
                "prompt_tokens": len(parts[0][0]),
                "completion_tokens": len(parts[1][0]),
            },
            {
                "messages": [
                    {"role": "user", "content": "Pick a number"},
                    {"role": "assistant", "content": "Is it 42?"},
                    {"role": "user", "content": "Higher"},
                ],
                "response": {"role": "assistant", "content": "Is it 73?"},
                "trainable": True,
                "prompt_tokens": len(parts[0][0]) + len(parts[1][0]) + len(parts[2][0]),
                "completion_tokens": len(parts[3][0]),
            },
        ],
        "host": [
            {
                "messages": [{"role": "system", "content": "You host.\nAnswer higher or lower."}],
                "response": {"role": "assistant", "content": "Higher"},
                "trainable": False,
                "prompt_tokens": 9,
                "completion_tokens": 2,
            }
        ],
    }
    return Episode(
        task={"task_id": "guess-7", "target": 73},
        group=2,
        timelines=[Timeline("alice", "policy", tokens, loss_mask, logprobs, num_calls=2)],
        rewards={"alice": 1.0},
        metrics={"turns": 2.0},
        roles={"alice": "guesser"},
        transcripts=transcripts,
        num_calls=2,
    )


def test_rollout_dump_has_tokens_text_and_completions_per_mask_run(tmp_path, tokenizer):
    episode = _two_call_episode(tokenizer)
    failed = Episode(
        task={"id": 8}, group=3, timelines=[], rewards={"alice": -1.0}, error="TimeoutError: 30 s", error_kind="timeout"
    )
    path = RolloutWriter(tmp_path).write(5, [episode, failed], {(0, "alice"): 0.75}, tokenizer)

    assert path == tmp_path / "rollouts" / "step_5.jsonl"
    assert ", " not in path.read_text().splitlines()[1], "compact JSON"
    timeline_line, frozen_line, failed_line = read_rollouts(path)
    timeline = episode.timelines[0]
    assert timeline_line | {"text": None, "completions": None, "token_texts": None} == {
        "step": 5,
        "episode": 0,
        "group": 2,
        "task_id": "guess-7",
        "agent": "alice",
        "model": "policy",
        "role": "guesser",
        "reward": 1.0,
        "advantage": 0.75,
        "error": None,
        "error_kind": None,
        "num_calls": 2,
        "tokens": timeline.tokens,
        "loss_mask": timeline.loss_mask,
        "logprobs": timeline.logprobs,
        "call_index": timeline.call_index,
        "text": None,
        "completions": None,
        "token_texts": None,
    }
    assert "".join(timeline_line["token_texts"]) == timeline_line["text"], "one decoded text per token, nothing lost"
    assert len(timeline_line["token_texts"]) == len(timeline.tokens)
    assert timeline_line["text"] == tokenizer.decode(timeline.tokens, skip_special_tokens=False)
    assert "Pick a number" in timeline_line["text"] and "Higher" in timeline_line["text"]
    assert timeline_line["completions"] == ["Is it 42?<|im_end|>", "Is it 73?<|im_end|>"]
    assert frozen_line == {
        "step": 5,
        "episode": 0,
        "group": 2,
        "task_id": "guess-7",
        "frozen_turns": {
            "host": [
                {
                    "new": [{"role": "system", "text": "You host.\nAnswer higher or lower."}],
                    "reply": {"role": "assistant", "text": "Higher"},
                    "completion_tokens": 2,
                }
            ]
        },
    }
    assert failed_line == {
        "step": 5,
        "episode": 1,
        "group": 3,
        "task_id": 8,
        "rewards": {"alice": -1.0},
        "metrics": {},
        "error": "TimeoutError: 30 s",
        "error_kind": "timeout",
    }


def test_rollout_dump_marks_dropped_advantages_as_null(tmp_path, tokenizer):
    path = RolloutWriter(tmp_path).write(1, [_two_call_episode(tokenizer)], {}, tokenizer)
    assert read_rollouts(path)[0]["advantage"] is None


def test_format_transcript_shows_each_agent_messages_reward_and_tokens(tokenizer):
    episode = _two_call_episode(tokenizer)
    episode.error = "ValueError: no guess"
    text = format_transcript(episode)
    calls = episode.transcripts["alice"]
    sampled = calls[0]["completion_tokens"] + calls[1]["completion_tokens"]
    total = sum(call["prompt_tokens"] + call["completion_tokens"] for call in calls)
    for expected in [
        "task 'guess-7'",
        "--- alice (role guesser) [trainable] ---",
        "--- host [frozen] ---",
        "user: Pick a number",
        "=> assistant: Is it 73?",
        "system: You host.\n",  # multi-line content stays readable
        "reward: 1",
        f"tokens: sampled {sampled}, total {total} over 2 call(s)",
        f"timelines: 1 ({len(episode.timelines[0].tokens)} tokens, {sum(episode.timelines[0].loss_mask)} trained)",
        "metrics: turns=2",
        "error: ValueError: no guess",
    ]:
        assert expected in text, expected
    assert text.index("--- alice") < text.index("--- host")


def test_progress_prints_one_plain_line_per_step_off_a_terminal(monkeypatch, capsys):
    monkeypatch.setenv("FORCE_COLOR", "1")  # some CI sets it; a log file still gets plain lines
    with TrainingProgress(total_steps=20) as progress:
        progress.update(3, {"reward/mean": 0.41234, "time/step": 12.34})
        progress.update(4, {"loss": 1.0})
    assert capsys.readouterr().out.splitlines() == ["step 3/20 reward=0.412 time=12.3s", "step 4/20"]


def test_progress_draws_a_bar_with_the_latest_metrics_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with TrainingProgress(total_steps=20, start_step=2) as progress:
        progress.update(3, {"reward/mean": 0.41234, "time/step": 12.34})
    out = capsys.readouterr().out
    assert "3/20" in out and "reward=0.412 time=12.3s" in out
    assert "step 3/20 reward" not in out, "no plain lines when the bar is drawn"


def test_progress_keeps_step_eta_and_reward_readable_at_80_columns(monkeypatch, capsys):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    with TrainingProgress(total_steps=20) as progress:
        counter = progress.episodes("step 2 rollouts", 8)
        counter.add(_finished_episode(1.0, 5))
        progress.update(1, {"reward/mean": 0.41234, "time/step": 12.34})
        progress._progress.refresh()
    out = capsys.readouterr().out
    assert "1/20" in out and "reward=0.412 time=12.3s" in out and "1/8" in out
    assert re.search(r"eta \d:\d\d:\d\d", out), "an ETA once a step is done, not -:--:--"


def test_off_a_terminal_a_line_comes_at_least_every_interval_even_between_episodes(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "PLAIN_LINE_INTERVAL_S", 0.2)
    monkeypatch.setattr(progress_module, "HEARTBEAT_POLL_S", 0.05)
    with TrainingProgress(total_steps=3) as progress:
        progress.episodes("step 1 rollouts", 4)
        time.sleep(0.5)  # a long rollout: no episode finishes
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) >= 2 and all(
            line == "  step 1 rollouts: 0/4 episodes, 0 tokens (0 tok/s)" for line in lines
        ), lines
    with TrainingProgress(total_steps=3) as progress:
        progress.update(1, {"reward/mean": 1.0})
        time.sleep(0.5)  # a long update: no phase in flight
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "step 1/3 reward=1.000" and len(lines) >= 2 and lines[1].startswith("step 2/3: still working"), (
        lines
    )


def test_print_table_shows_title_columns_and_values(capsys):
    print_table(
        "before / after",
        [{"model": "base", "win_rate": 0.25}, {"model": "trained", "win_rate": 0.6875, "extra": 1}],
        ["model", "win_rate", "turns"],
    )
    out = capsys.readouterr().out
    for expected in ["before / after", "model", "win_rate", "base", "0.250", "trained", "0.688", "-"]:
        assert expected in out, expected
    assert "extra" not in out


def _finished_episode(reward: float, tokens: int, error: str | None = None) -> Episode:
    calls = [{"messages": [], "response": {}, "trainable": True, "prompt_tokens": 4, "completion_tokens": tokens}]
    return Episode(
        task={},
        group=0,
        timelines=[],
        rewards={"alice": reward},
        metrics={"success": reward},
        error=error,
        transcripts={"alice": calls},
    )


def test_episode_progress_prints_a_plain_summary_when_an_evaluation_ends_off_a_terminal(capsys):
    with ConsoleProgress() as progress:
        counter = progress.episodes("eval trained", 2, final_line=True)
        counter.add(_finished_episode(1.0, 5))
        assert capsys.readouterr().out == "", "no line per episode: at most one per interval, and one at the end"
        counter.add(_finished_episode(0.0, 3, error="TimeoutError"))
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(
        r"eval trained: 2/2 episodes, 8 tokens \(\d+ tok/s\) reward=0\.500 success=0\.500 errors=1", line
    ), line


def test_episode_progress_prints_periodic_lines_for_a_long_phase(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "PLAIN_LINE_INTERVAL_S", 0.0)
    with TrainingProgress(total_steps=3) as progress:
        counter = progress.episodes("step 1 rollouts", 4)
        counter.add(_finished_episode(1.0, 5))
    assert capsys.readouterr().out.startswith("  step 1 rollouts: 1/4 episodes, 5 tokens")


def test_episode_progress_is_a_bar_beside_the_step_bar_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "160")  # a wide terminal shows the whole episode summary
    with TrainingProgress(total_steps=20) as progress:
        counter = progress.episodes("step 1 rollouts", 4)
        counter.add(_finished_episode(1.0, 5))
        progress._progress.refresh()
        out = capsys.readouterr().out
        assert "step 1 rollouts" in out and "1/4" in out and "5 tokens" in out and "reward=1.000" in out
        for _ in range(3):
            counter.add(_finished_episode(0.0, 1))
        assert len(progress._progress.tasks) == 1, "a finished phase leaves the display"


def test_disabled_progress_prints_nothing(capsys):
    with TrainingProgress(total_steps=2, enabled=False) as progress:
        progress.episodes("eval trained", 1, final_line=True).add(_finished_episode(1.0, 2))
        progress.update(1, {"reward/mean": 1.0})
    assert capsys.readouterr().out == ""
