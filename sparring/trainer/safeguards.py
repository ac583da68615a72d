"""The run's safeguards: what stops a run, or says why, rather than let it go on silently on damage -- checkpoints that
verify themselves, weights checked finite, a streak of failing steps, a step or a run that trained nothing -- and
what stops it cleanly when asked: a stop signal.

Each safeguard ends in one of the run's own errors, one line naming what is wrong: `CheckpointError`,
`NonFiniteWeightsError`, `EpisodesFailingError`, `NothingTrainedError`.

Checkpoints that verify themselves. A checkpoint is spread over several places (its step folder, each model's training
state, the older weights and snapshot opponents it names), any of which a crash, a full disk or a hand can damage.
`write_manifest` records the name, size and sha256 of every such file in `manifest.json`, written last and atomically
(`write_atomically`, before `latest.json` points at the checkpoint), and `verify_manifest` refuses a checkpoint whose
files are missing, truncated or changed, naming the first bad file. `check_training_state` reads what a model's state
holds -- no more optimizer steps than the checkpoint's step, an adapter config that parses, finite adapter and optimizer
tensors -- so a checkpoint written without a manifest is refused on the same grounds, and a NaN saved by a bug is never
trained on. What a checkpoint's files hold is checked against each other and the model in `checkpoints.py`.
`check_finite_weights` runs after every optimizer step, so a NaN is named at the step that produced it.

The failure streak. Failed episodes are data, so a step goes on training its healthy episodes. A step in which none
is healthy (each raised, timed out, returned an outcome that does not fit, or reported its own `error` metric of 1)
trains nothing useful, and such steps in a row mean the workflow is broken, not unlucky: `FailureStreak` warns on
each one with the commonest error kind and an example message, and once `AlgorithmConfig.stop_after_failed_steps`
of them come in a row the loop saves a checkpoint and raises `EpisodesFailingError`. A run whose every step failed
whole raises it too at its end, without a "final" adapter. Either message leads with the streak's first error.

The training signal. A step trains the sampled tokens whose advantage is not zero (`tokens/trained`). When a step
trains none, one of a few causes is behind it: no trainable agent spoke, every episode failed, or every group's
episodes got the same reward (group-relative advantages are then all zero). `TrainingSignal` names the cause in a
warning on each such step, and a run in which no step trained a token raises `NothingTrainedError` at its end --
after its checkpoint, without a "final" adapter, which would only equal the initial one; a deliberate dry run opts
out with `AlgorithmConfig.allow_nothing_trained`. Before a step trains nothing the signal thins: when over half of a
step's groups have tied for `THINNING_STEPS` steps in a row, `TrainingSignal` warns that the policy is collapsing,
naming the collapse measures to read.

Stopping cleanly on SIGINT (Ctrl-C) or SIGTERM: `StopSignals` replaces the two signals' handlers while a run trains.
The first one only records which signal came (`signum`) and wakes the run, which cancels the episodes in flight
(`cancelling`: a rollout or evaluation raced against the signal), lets an optimizer step or checkpoint that has begun
finish (cancelling one halfway would leave live weights a step ahead of the step logged), stops at the next step
boundary (`check`, raising `Stopped`), checkpoints the last completed step, and exits `128 + signum` (130, 143). A
second signal quits at once (`os._exit`), for a run that cannot stop in time. Nothing is raised inside the code a
signal lands in (Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread is, which left
asyncio tasks with half-run coroutines and tracebacks); the run decides where to stop. The handlers are plain
`signal.signal` ones, not the event loop's: they run even while the loop is blocked (loading a model), so a second
signal quits then too, and they wake the loop with `call_soon_threadsafe`. Python runs signal handlers in the main
thread only, so `install` works only there; elsewhere it says False and a KeyboardInterrupt or cancellation still
stops the run with a checkpoint, without these guarantees.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from safetensors.torch import load_file

from ..rollout import Episode

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
"""The file, in a checkpoint's step folder, listing every file the checkpoint needs."""


class CheckpointError(ValueError):
    """A checkpoint cannot be resumed (a file missing, truncated, changed or holding non-finite numbers), or training
    produced weights that must not be saved; the message names the file or the step, on one line."""


class CheckpointSaveError(CheckpointError):
    """A checkpoint could not be written (a full disk, a read-only folder); the message names where and what is
    intact."""


def one_line(error: BaseException) -> str:
    """An error's message on one line (torch's write errors span several)."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


class NonFiniteWeightsError(CheckpointError):
    """An optimizer step left NaN or infinite adapter weights: the run stops before they are saved."""


def write_manifest(directory: Path, run_dir: Path, sources: list[Path]) -> Path:
    """Record every file under `sources` (files or folders) in `directory/manifest.json`, atomically."""
    files = {}
    for source in sources:
        for path in sorted([source] if source.is_file() else (p for p in source.rglob("*") if p.is_file())):
            files[_name(path, run_dir)] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    manifest = directory / MANIFEST
    write_atomically(manifest, json.dumps({"files": files}, indent=1))
    return manifest


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so a reader sees the old file or the whole new one, never a part."""
    temporary = path.with_name(
        f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    )  # the pipeline saves from a thread
    temporary.write_text(text)
    os.replace(temporary, path)


def verify_manifest(directory: Path, run_dir: Path) -> bool:
    """Check every file the manifest lists; CheckpointError naming the first bad one. False when there is no
    manifest."""
    manifest = directory / MANIFEST
    if not manifest.exists():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(
            f"checkpoint {directory}: {manifest} is damaged ({error}); resume from an older checkpoint by "
            "pointing checkpoints/latest.json at it"
        ) from None
    for name, expected in files.items():
        path = Path(name) if os.path.isabs(name) else run_dir / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint {directory}: {path} is missing")
        size = path.stat().st_size
        if size != expected["size"]:
            raise CheckpointError(
                f"checkpoint {directory}: {path} has {size} bytes, {expected['size']} were saved "
                "(truncated or overwritten)"
            )
        if _sha256(path) != expected["sha256"]:
            raise CheckpointError(f"checkpoint {directory}: {path} changed since it was saved (sha256 differs)")
    return True


def check_training_state(path: Path, step: int) -> None:
    """Read a model's saved training state (`save_state`'s folder) and refuse it, naming the file, unless it was saved
    after at most `step` optimizer steps and its adapter config parses and its adapter and optimizer tensors are
    finite."""
    state_file, config_file = path / "state.json", path / "adapter" / "adapter_config.json"
    state = _read_json(state_file)
    steps = state.get("optimizer_steps")
    if not isinstance(steps, int) or not 0 <= steps <= step:  # fewer when a step gave a model nothing to train on
        raise CheckpointError(
            f"{state_file}: saved after {steps!r} optimizer steps, more than the checkpoint's {step} steps allow"
        )
    if not isinstance(_read_json(config_file).get("r"), int):
        raise CheckpointError(f"{config_file}: no LoRA rank 'r' in it")
    for weights in sorted((path / "adapter").glob("*.safetensors")):
        try:
            tensors = load_file(weights)
        except Exception as error:  # noqa: BLE001 - any unreadable file is one line naming it
            raise CheckpointError(f"{weights}: unreadable ({type(error).__name__}: {error})") from None
        _refuse_non_finite(weights, tensors.items())
    optimizer_file = path / "optimizer.pt"
    try:
        optimizer = torch.load(optimizer_file, map_location="cpu", weights_only=False)["optimizer"]
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"{optimizer_file}: unreadable ({type(error).__name__}: {error})") from None
    if optimizer is not None:
        _refuse_non_finite(
            optimizer_file,
            (
                (f"state {index} {name}", value)
                for index, entry in optimizer["state"].items()
                for name, value in entry.items()
            ),
        )


async def check_finite_weights(clients: dict, step: int) -> None:
    """After optimizer step `step` (counted from 1): NonFiniteWeightsError naming it when a model's adapter holds NaN
    or infinity. Local models are read on their engine; a service's weights are its own to check."""
    for key, client in clients.items():
        engine = getattr(client, "engine", None)
        if engine is None:
            continue
        parameters = engine.bank.parameters
        finite = await asyncio.wrap_future(
            engine.call(
                lambda adapter=client.adapter, parameters=parameters: all(
                    bool(torch.isfinite(p).all()) for p in parameters(adapter)
                )
            )
        )
        if not finite:
            raise NonFiniteWeightsError(
                f"step {step}: the optimizer step left NaN or infinite weights in model {key!r}; they were "
                "not saved (the latest checkpoint is "
                "the step before it, or earlier); lower algorithm.learning_rate or algorithm.grad_clip_norm and resume"
            )


def _refuse_non_finite(path: Path, tensors) -> None:
    for name, value in tensors:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values")
        if isinstance(value, float) and not math.isfinite(value):
            raise CheckpointError(f"{path}: {name} is {value}")


def _read_json(path: Path) -> dict:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable ({type(error).__name__}: {error})") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return loaded


def _name(path: Path, run_dir: Path) -> str:
    """A manifest entry: relative to the run folder when inside it (the folder can move), else absolute."""
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path.resolve())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class EpisodesFailingError(RuntimeError):
    """Every episode failed for `stop_after_failed_steps` steps in a row, or in every step of the run: it trained
    nothing since."""


@dataclass
class FailureStreak:
    """Counts the steps in a row in which every episode failed, and the steps of the run that trained something."""

    limit: int
    """Steps in a row that stop the run; 0 never stops it."""
    steps: int = 0
    """All-failed steps in a row so far."""
    healthy_steps: int = 0
    """Steps of this run with at least one episode that did not fail: they trained something."""
    first_error: str = ""
    """The first error of the streak's first step (its first failed episode in task order): kind and reason."""
    commonest: str = ""
    """The commonest error of the last all-failed step: its kind, share and an example message."""

    def observe(self, episodes: list[Episode]) -> str | None:
        """Count one step; the warning line when every episode of it failed, else None (and the streak ends)."""
        if not episodes or not all(episode.failed for episode in episodes):
            self.steps = 0
            self.healthy_steps += 1
            return None
        failures = [episode.failure for episode in episodes]
        if self.steps == 0:
            self.first_error = ": ".join(failures[0])
        self.steps += 1
        kind, count = Counter(kind for kind, _ in failures).most_common(1)[0]
        example = next(reason for failed_kind, reason in failures if failed_kind == kind)
        self.commonest = f"{kind} in {count} of {len(episodes)} episodes, e.g. {example}"
        return f"every episode of this step failed ({self.steps} step(s) in a row); commonest error: {self.commonest}"

    @property
    def exhausted(self) -> bool:
        return self.limit > 0 and self.steps >= self.limit

    def failure(self, last_step: int) -> str | None:
        """Why the run failed, having run up to `last_step`: the streak stopped it, or every step it ran failed
        whole; else None."""
        if self.exhausted:
            why = (
                f"stopped after step {last_step}: every episode failed in {self.steps} steps in a row "
                "(algorithm.stop_after_failed_steps)"
            )
        elif self.steps and not self.healthy_steps:
            why = (
                f"every episode failed in every step this run took ({self.steps}, up to step {last_step}): "
                "nothing was trained"
            )
        else:
            return None
        return f"{why}; first error: {self.first_error}; commonest error: {self.commonest}"


OPT_OUT = "algorithm.allow_nothing_trained=true"
"""The setting that makes a run that trains nothing a deliberate dry run."""
THINNING_SHARE = 0.5
"""A step whose share of tied (zero-variance) groups is above this one thins the signal."""
THINNING_STEPS = 3
"""Thinning steps in a row before the collapse warning."""


class NothingTrainedError(RuntimeError):
    """No step of the run trained a token: its adapter is the one it started from."""


def untrained_cause(episodes: list[Episode], metrics: dict[str, float]) -> str | None:
    """Why a step with these episodes and metrics trained no token; None when it trained some."""
    if metrics.get("tokens/trained", 0.0) > 0:
        return None
    if not any(episode.timelines for episode in episodes):
        return (
            "no trainable agent spoke (no episode called a trainable model: check that the workflow's agents "
            "use `model`, or a target_tag in trainable_targets)"
        )
    if all(episode.failed for episode in episodes):
        return "every episode failed"
    groups = int(metrics.get("advantage/groups", 0))
    if groups and metrics.get("advantage/zero_variance_fraction", 0.0) >= 1.0:
        rewards = sorted({reward for episode in episodes for reward in episode.rewards.values()})
        shown = ", ".join(f"{reward:g}" for reward in rewards[:5]) + (", ..." if len(rewards) > 5 else "")
        return (
            f"every group's episodes got the same reward ({groups} group(s); rewards seen: {shown}), so "
            "every advantage is 0: "
            "give partial credit in the reward, raise algorithm.group_size, or sample more diversely "
            "(model.temperature)"
        )
    return "every sampled token's advantage is 0 (check the rewards and algorithm.algorithm_type)"


@dataclass
class TrainingSignal:
    """Counts the steps of a run that trained a token, and remembers why the last one that did not trained none."""

    trained_before: bool = False
    """A resumed run's earlier steps trained a token."""
    trained_steps: int = 0
    """Steps of this process's run that trained at least one token."""
    last_cause: str = ""
    """Why the last step that trained no token trained none."""
    thinning_streak: int = 0
    """Steps in a row on which over `THINNING_SHARE` of the groups tied."""

    def observe(self, episodes: list[Episode], metrics: dict[str, float]) -> str | None:
        """Count one step; the warning line when it trained no token, else None."""
        tied = metrics.get("advantage/zero_variance_fraction", 0.0)
        self.thinning_streak = self.thinning_streak + 1 if tied > THINNING_SHARE else 0
        cause = untrained_cause(episodes, metrics)
        if cause is None:
            self.trained_steps += 1
            return None
        self.last_cause = cause
        return f"trained no token: {cause}"

    def collapse_warning(self, metrics: dict[str, float]) -> str | None:
        """The warning line when the last observed step made the thinning streak a multiple of `THINNING_STEPS`."""
        if not self.thinning_streak or self.thinning_streak % THINNING_STEPS:
            return None
        return (
            f"the policy may be collapsing: over {THINNING_SHARE:.0%} of the groups tied for "
            f"{self.thinning_streak} steps in a row "
            f"({metrics.get('advantage/zero_variance_fraction', 0.0):.0%} now; collapse/entropy "
            f"{metrics.get('collapse/entropy', float('nan')):.3f}, "
            f"collapse/distinct_share {metrics.get('collapse/distinct_share', float('nan')):.2f}): "
            "sample more diversely (model.temperature), vary opponents or seeds within a group, or give partial credit"
        )

    @property
    def trained_anything(self) -> bool:
        """Some step of the run (this process's or, resumed, an earlier one) trained a token."""
        return self.trained_before or self.trained_steps > 0

    def failure(self, steps: int) -> str:
        """The one-line reason a run of `steps` steps that trained nothing fails."""
        return f"no step of this run trained a token ({steps} step(s)); last cause: {self.last_cause}"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a run with a checkpoint."""


T = TypeVar("T")


class Stopped(Exception):
    """A stop signal came: the run ends at the last completed step."""


class StopSignals:
    """While installed, SIGINT and SIGTERM ask the run to stop; a second one of them quits the process at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        """The first stop signal received; None while none came."""
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> bool:
        """Take over SIGINT and SIGTERM for the running loop; False (nothing installed) off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._receive)
        return True

    def restore(self) -> None:
        """Put the handlers from before `install` back."""
        for signum, previous in self._previous.items():
            signal.signal(
                signum, previous if previous is not None else signal.SIG_DFL
            )  # None: set from C, not restorable
        self._previous.clear()
        self._loop = None

    def check(self) -> None:
        """At a step boundary: raise Stopped once a stop signal came."""
        if self.requested:
            raise Stopped(signal.Signals(self.signum).name)

    async def cancelling(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`; a stop signal meanwhile cancels it (waiting for it to unwind) and raises Stopped."""
        if self.requested:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started: no "never awaited" warning
            self.check()
        task = asyncio.ensure_future(awaitable)
        woken = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, woken}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            woken.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise Stopped(signal.Signals(self.signum).name)

    def _receive(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(
                f"{name} again: quitting at once, without a checkpoint of the step in flight",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signum)
        self.signum = signum
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._event.set)
        log.warning(
            "%s: cancelling the episodes in flight and saving a checkpoint of the last completed step (%s "
            "again quits at once)",
            name,
            name,
        )
