"""What the policy actually saw and said: rollout dumps and readable transcripts.

`RolloutWriter` writes one JSON-lines file per training step,
`run_dir/rollouts/step_{step}.jsonl`, numbered from 1 as the console and
metrics.jsonl number steps, with one line per `Timeline` (the exact
token ids, loss mask, sampler logprobs, the call each token came from and the
advantage that went into the update, plus the decoded text, whole and per
token, so a human or `sparring view` can read it without a tokenizer), one
line per episode that produced no timeline (it failed before its first call,
or only frozen models spoke), so no episode vanishes from the record, and one
`frozen_turns` line per episode in which agents that do not learn spoke
(their turns as text: the messages new to each call and the reply). An error
episode's lines carry its `error` and `error_kind`.
`read_rollouts` reads a dump back. `format_transcript` renders one `Episode`'s per-agent
conversations for the debug `sparring run` command.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from sparring.rollout.types import Episode, Timeline

ROLLOUTS_DIR = "rollouts"


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _short_number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _task_id(task: dict) -> Any:
    """The task's own identifier (``task_id`` or ``id``), if it has one."""
    return task.get("task_id", task.get("id"))


def sampled_spans(loss_mask: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of every maximal run of ``loss_mask == 1``: one per merged completion."""
    spans = []
    start = None
    for position, bit in enumerate([*loss_mask, 0]):
        if bit and start is None:
            start = position
        elif not bit and start is not None:
            spans.append((start, position))
            start = None
    return spans


class RolloutWriter:
    """Writes each training step's episodes, token for token, under ``run_dir/rollouts``."""

    def __init__(self, run_dir: Path) -> None:
        self.directory = Path(run_dir) / ROLLOUTS_DIR

    def path_for(self, step: int) -> Path:
        return self.directory / f"step_{step}.jsonl"

    def write(
        self, step: int, episodes: list[Episode], advantages: dict[tuple[int, str], float | list[float]], tokenizer
    ) -> Path:
        """Dump ``episodes`` of ``step`` (1-based, as metrics.jsonl) atomically; ``advantages[(episode_index, agent)]``
        is absent if dropped."""
        lines = []
        for index, episode in enumerate(episodes):
            episode_fields = {"step": step, "episode": index, "group": episode.group, "task_id": _task_id(episode.task)}
            for timeline in episode.timelines:
                lines.append(episode_fields | self._timeline_fields(index, episode, timeline, advantages, tokenizer))
            if not episode.timelines:
                lines.append(
                    episode_fields
                    | {
                        "rewards": {agent: _finite_or_none(reward) for agent, reward in episode.rewards.items()},
                        "metrics": {key: _finite_or_none(value) for key, value in episode.metrics.items()},
                        "error": episode.error,
                        "error_kind": episode.error_kind,
                    }
                )
            frozen = frozen_turns(episode)
            if frozen:
                lines.append(episode_fields | {"frozen_turns": frozen})
        path = self.path_for(step)
        _write_lines_atomically(path, lines)
        return path

    @staticmethod
    def _timeline_fields(
        index: int,
        episode: Episode,
        timeline: Timeline,
        advantages: dict[tuple[int, str], float | list[float]],
        tokenizer,
    ) -> dict:
        advantage = advantages.get((index, timeline.agent))
        text = tokenizer.decode(timeline.tokens, skip_special_tokens=False)
        return {
            "agent": timeline.agent,
            "model": timeline.model,
            "role": episode.roles.get(timeline.agent),
            "reward": _finite_or_none(episode.rewards.get(timeline.agent)),
            "advantage": [_finite_or_none(value) for value in advantage]
            if isinstance(advantage, list)
            else _finite_or_none(advantage),
            "error": episode.error,
            "error_kind": episode.error_kind,
            "num_calls": timeline.num_calls,
            "tokens": timeline.tokens,
            "loss_mask": timeline.loss_mask,
            "logprobs": [_finite_or_none(logprob) for logprob in timeline.logprobs],
            "call_index": timeline.call_index,
            **({"constrained": allowed_counts(timeline, len(tokenizer))} if timeline.allowed_tokens else {}),
            "text": text,
            "token_texts": token_texts(tokenizer, timeline.tokens, text),
            "completions": [
                tokenizer.decode(timeline.tokens[start:end], skip_special_tokens=False)
                for start, end in sampled_spans(timeline.loss_mask)
            ],
        }


def allowed_counts(timeline: Timeline, vocab_size: int) -> list[int]:
    """Per token, how many tokens the constraint allowed where it was sampled; 0 where nothing was constrained."""
    return [
        0 if not allowed else len(allowed) if allowed[0] >= 0 else vocab_size - len(allowed)
        for allowed in timeline.allowed_tokens
    ]


def frozen_turns(episode: Episode) -> dict[str, list[dict]]:
    """Per agent that made no trainable call, its calls as text: ``{"new": [messages new to this call], "reply":
    message}``.

    Each call's prompt usually repeats the agent's conversation so far; only the messages past the previous call's
    prompt and reply are kept, so a long game is stored once, not once per turn.
    """
    trained = {timeline.agent for timeline in episode.timelines}
    turns: dict[str, list[dict]] = {}
    for agent, calls in episode.transcripts.items():
        if agent in trained or any(call.get("trainable") for call in calls):
            continue
        seen: list[dict] = []
        for call in calls:
            messages = list(call.get("messages", []))
            new = messages[len(seen) :] if messages[: len(seen)] == seen else messages
            response = call.get("response") or {}
            turns.setdefault(agent, []).append(
                {
                    "new": [_text_message(message) for message in new],
                    "reply": _text_message({"role": "assistant", **response}),
                    "completion_tokens": call.get("completion_tokens", 0),
                }
            )
            seen = [*messages, response]
    return turns


def _text_message(message: dict) -> dict:
    return {"role": message.get("role", "?"), "text": _message_text(message)}


def token_texts(tokenizer, tokens: list[int], text: str) -> list[str]:
    """Each token's share of ``text`` (the decode of ``tokens``): the pieces join back to exactly ``text``.

    Decoded one by one, a character split over several byte tokens comes out as replacement characters; then the
    text is cut as a streaming detokenizer does: a token's piece is what it adds to the decode of a short window
    before it, held back (empty) while the decode ends in a partial character, given whole to the token completing it.
    """
    singles = tokenizer.batch_decode([[token] for token in tokens], skip_special_tokens=False)
    if "".join(singles) == text:
        return singles
    pieces: list[str] = []
    prefix_offset = read_offset = 0
    for end in range(1, len(tokens) + 1):
        before = tokenizer.decode(tokens[prefix_offset:read_offset], skip_special_tokens=False)
        after = tokenizer.decode(tokens[prefix_offset:end], skip_special_tokens=False)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            pieces.append(after[len(before) :])
            prefix_offset, read_offset = read_offset, end
        else:
            pieces.append("")
    pieces[-1] += text[len("".join(pieces)) :] if tokens else ""
    return pieces


def _write_lines_atomically(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    file_descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(file_descriptor, "w", encoding="utf-8") as file:
            for record in records:
                file.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_rollouts(path: str | Path) -> list[dict]:
    """Read a ``step_{step}.jsonl`` rollout dump as a list of records."""
    with Path(path).open(encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def _message_text(message: dict) -> str:
    """A chat message's content as text: plain strings, text parts of multi-part content, tool calls."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    text = "" if content is None else str(content)
    if message.get("tool_calls"):
        text += ("\n" if text else "") + "tool_calls: " + json.dumps(message["tool_calls"], ensure_ascii=False)
    return text


def _indented(role: str, text: str, indent: str = "    ") -> str:
    first, *rest = text.split("\n")
    continuation = " " * (len(role) + 2)
    return "\n".join([f"{indent}{role}: {first}", *(f"{indent}{continuation}{line}" for line in rest)])


def _agent_section(episode: Episode, agent: str) -> list[str]:
    calls = episode.transcripts.get(agent, [])
    role = episode.roles.get(agent)
    trainable = any(call.get("trainable") for call in calls) or any(t.agent == agent for t in episode.timelines)
    role_text = f" (role {role})" if role else ""
    scripted = next((call["scripted"] for call in calls if call.get("scripted")), None)
    kind = "trainable" if trainable else f"scripted: {scripted}" if scripted else "frozen"
    lines = [f"--- {agent}{role_text} [{kind}] ---"]
    for number, call in enumerate(calls, start=1):
        lines.append(
            f"  call {number} (prompt {call.get('prompt_tokens', 0)} tokens,"
            f" completion {call.get('completion_tokens', 0)} tokens)"
        )
        for message in call.get("messages", []):
            lines.append(_indented(message.get("role", "?"), _message_text(message)))
        response = call.get("response") or {}
        lines.append(_indented(f"=> {response.get('role', 'assistant')}", _message_text(response)))
    if agent in episode.rewards:
        lines.append(f"  reward: {_short_number(episode.rewards[agent])}")
    sampled = sum(call.get("completion_tokens", 0) for call in calls)
    total = sum(call.get("prompt_tokens", 0) + call.get("completion_tokens", 0) for call in calls)
    lines.append(f"  tokens: sampled {sampled}, total {total} over {len(calls)} call(s)")
    timelines = [timeline for timeline in episode.timelines if timeline.agent == agent]
    if timelines:
        merged = sum(len(timeline.tokens) for timeline in timelines)
        trained = sum(sum(timeline.loss_mask) for timeline in timelines)
        lines.append(f"  timelines: {len(timelines)} ({merged} tokens, {trained} trained)")
    return lines


def format_transcript(episode: Episode) -> str:
    """Render an episode's conversations per agent: messages, replies, reward, token counts, error."""
    agents = list(
        dict.fromkeys([*episode.transcripts, *(timeline.agent for timeline in episode.timelines), *episode.rewards])
    )
    lines = [f"=== episode (group {episode.group}, task {_task_id(episode.task)!r}) ==="]
    for agent in agents:
        lines.extend(_agent_section(episode, agent))
    if episode.metrics:
        lines.append("metrics: " + ", ".join(f"{key}={_short_number(value)}" for key, value in episode.metrics.items()))
    if episode.error:
        lines.append(f"error: {episode.error}" + (f" [{episode.error_kind}]" if episode.error_kind else ""))
    return "\n".join(lines)
