"""The commands that run a config: `sparring train`, `sparring run` (episodes without training, transcripts
printed) and `sparring eval` (held-out evaluation beside the baselines), and the comparison table they print."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from pathlib import Path

import typer

from ..envs import GAMES
from .common import _GAME_NAMES, CONFIG, OVERRIDES, _config_errors, _load, app


@app.command()
def train(
    config: Path | None = typer.Argument(
        None, help=f"The job's YAML config, or a game's name ({_GAME_NAMES}); not needed with --resume."
    ),
    overrides: list[str] = OVERRIDES,
    resume: Path | None = typer.Option(None, help="Continue the run in this directory from its latest checkpoint."),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Replace the run already in the config's run_dir (without it, a run folder that is not empty is refused).",
    ),
    steps: int | None = typer.Option(
        None, "--steps", help="Train this many steps (a short run: the same as --set train_dataset.total_steps=N)."
    ),
    eval_tasks: int | None = typer.Option(
        None,
        "--eval-tasks",
        help="Evaluate on at most this many held-out tasks (the same as --set evaluation.max_tasks=N).",
    ),
    conf: Path | None = typer.Option(
        None,
        "--conf",
        help="The job's YAML config, as a flag (AgentJet's spelling): the same as giving it as the argument.",
    ),
):
    """Train the workflow's trainable agents."""
    if conf is not None:
        if config is not None:
            typer.echo(
                f"error: give the config once: as the argument ({config}) or as --conf ({conf}), not both", err=True
            )
            raise typer.Exit(2)
        config = conf
    if resume is not None:
        if overwrite:
            typer.echo("error: give --resume (continue the run) or --overwrite (replace it), not both", err=True)
            raise typer.Exit(2)
        if not (resume / "config.yaml").is_file():
            what = "does not exist" if not resume.exists() else "holds no run (no config.yaml)"
            typer.echo(
                f"error: --resume {resume}: the folder {what}; give a run directory that `sparring train` wrote",
                err=True,
            )
            raise typer.Exit(2)
        if config is not None and not _same_file(config, resume / "config.yaml"):
            own = resume / "config.yaml"
            typer.echo(
                f"error: --resume {resume} runs that run's own config ({own}), so {config} would be ignored: "
                "drop it to continue the run (change a setting with --set), or drop --resume to start a new run",
                err=True,
            )
            raise typer.Exit(2)
        config = resume / "config.yaml"
    shortcuts = {"train_dataset.total_steps": steps, "evaluation.max_tasks": eval_tasks}
    overrides = [*overrides, *(f"{field}={value}" for field, value in shortcuts.items() if value is not None)]
    if config is None:
        typer.echo(f"error: give a config file or a game's name ({', '.join(GAMES)}), or --resume RUN_DIR", err=True)
        raise typer.Exit(2)
    loaded = _load(config, overrides)
    from ..trainer import CheckpointError, EpisodesFailingError, Job, NothingTrainedError

    try:
        with _config_errors(config):
            result = Job.from_config(loaded).tune(resume=str(resume) if resume else None, overwrite=overwrite)
    except KeyboardInterrupt:  # before the run took the signals over (while starting): nothing to save yet
        typer.echo("interrupted before training started", err=True)
        raise typer.Exit(130) from None
    except (EpisodesFailingError, NothingTrainedError, CheckpointError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    except (
        OSError
    ) as error:  # a full disk or a folder it may not write, outside a checkpoint (metrics, rollouts, report)
        run_dir = resume or (Path(loaded.run_dir) if loaded.run_dir else None)
        typer.echo(
            f"error: could not write {error.filename or 'a file'}: {error.strerror or error}; {_saved_so_far(run_dir)}",
            err=True,
        )
        raise typer.Exit(1) from None
    if result.interrupted:
        cause = signal.Signals(result.stop_signal).name if result.stop_signal else "interrupted"
        typer.echo(
            f"{cause}: stopped after step {result.steps}, checkpoint saved at {result.checkpoint}, no "
            f"final adapter; continue with: sparring train --resume {result.run_dir}",
            err=True,
        )
        raise typer.Exit(128 + (result.stop_signal or signal.SIGINT))
    typer.echo(f"done: {result.steps} steps in {result.run_dir}")
    for name, path in result.sampler_paths.items():
        typer.echo(f"  {name}: {path}")
    if result.best is not None:
        chosen = result.best
        typer.echo(
            f"best on the validation tasks: step {chosen.steps}, {loaded.validation.metric} "
            f"{chosen.mean:.3f} [{chosen.low:.2f}, {chosen.high:.2f}] (validation.json)"
        )
        for name, path in result.best_paths.items():
            typer.echo(f"  {name}: {path}")
    if result.comparison is not None:
        _print_comparison("Held-out evaluation (before -> after training, beside the baselines)", result.comparison)
        typer.echo(f"comparison: {result.run_dir / 'evaluation.json'}")
    typer.echo(f"reward curve: {result.reward_plot_path} (and reward.svg beside it)")
    typer.echo(f"report (open in a browser): {result.report_path}")


def _same_file(given: Path, saved: Path) -> bool:
    """Whether the config given beside --resume is the run's own config.yaml (the same file)."""
    try:
        return given.resolve().samefile(saved)
    except OSError:
        return False


def _saved_so_far(run_dir: Path | None) -> str:
    """What a failed run left to continue from, for its one-line error."""
    from ..trainer import CheckpointError
    from ..trainer.checkpoints import latest_checkpoint

    try:
        checkpoint = latest_checkpoint(run_dir) if run_dir is not None else None
    except (OSError, CheckpointError):
        checkpoint = None
    if checkpoint is None:
        return "no checkpoint was saved"
    return f"the checkpoint {checkpoint} is saved; continue with: sparring train --resume {run_dir}"


@app.command()
def run(
    config: Path = CONFIG,
    overrides: list[str] = OVERRIDES,
    tasks: int = typer.Option(2, help="How many tasks to run (at least 1)."),
    split: str = typer.Option("train", help="train or eval tasks."),
):
    """Run episodes without training and print every agent's transcript, reward and token counts."""
    if split not in ("train", "eval"):
        typer.echo(f"error: --split {split!r}: use 'train' or 'eval'", err=True)
        raise typer.Exit(2)
    _at_least_one_task(tasks)
    loaded = _load(config, overrides)
    from ..logging import format_transcript
    from ..trainer.loop import run_debug_episodes

    with _config_errors(config):
        episodes = asyncio.run(run_debug_episodes(loaded, num_tasks=tasks, split=split))
    for episode in episodes:
        typer.echo(format_transcript(episode))
        typer.echo("")
    _check_debug_episodes(episodes)


def _check_debug_episodes(episodes) -> None:
    """After `sparring run`'s transcripts: exit code 1 when episodes failed (how many, the first reason), a warning
    when no trainable agent spoke (training on such episodes would learn nothing)."""
    failed = [episode for episode in episodes if episode.failed]
    if failed:
        kind, reason = failed[0].failure
        first = (reason.splitlines() or [""])[0]
        counted = f"{len(failed)} of {len(episodes)} episodes failed"
        typer.echo(f"error: {counted} (first: {first} [{kind}]); fix the workflow", err=True)
        raise typer.Exit(1)
    if not any(episode.timelines for episode in episodes):
        typer.echo(
            "warning: no trainable agent spoke in any episode, so training on them would learn nothing; "
            "the workflow must call the model it is given (or an agent of a trainable model)",
            err=True,
        )


@app.command("eval")
def evaluate(
    config: Path = CONFIG,
    overrides: list[str] = OVERRIDES,
    adapter: list[Path] | None = typer.Option(
        None,
        metavar="<path>",
        help="A saved PEFT adapter to evaluate instead of the base model, at its own LoRA rank (configs with "
        "one trainable model). Repeat it to "
        "compare several, e.g. a run's snapshots, in one table: a column each, named by its folder; ▲ / ▼ "
        "compare the last.",
    ),
    tasks: int | None = typer.Option(None, help="Evaluate on the first N eval tasks (at least 1)."),
    output: Path | None = typer.Option(
        None,
        help="Write the comparison (every metric of every column, with intervals) here; default RUN_DIR/eval.json.",
    ),
):
    """Evaluate a model (base, or --adapter) and the config's baselines on the held-out tasks."""
    _at_least_one_task(tasks)
    loaded = _load(config, overrides)
    adapters = adapter or []
    if adapters and len(loaded.trainable_models()) != 1:
        keys = sorted(loaded.trainable_models())
        typer.echo(
            f"error: --adapter needs a config with one trainable model; this one trains {keys}: use --set "
            "models.<name>.adapter_path=PATH",
            err=True,
        )
        raise typer.Exit(2)
    from ..trainer.loop import run_evaluation

    with _config_errors(config):
        if len(adapters) > 1:
            comparison = asyncio.run(_compare_adapters(config, overrides, _trainable_field(loaded), adapters, tasks))
        else:
            if adapters:
                loaded = _load(config, [*overrides, f"{_trainable_field(loaded)}.adapter_path={adapters[0]}"])
            comparison = asyncio.run(run_evaluation(loaded, limit=tasks))
    _print_comparison("Held-out evaluation", comparison)
    written = comparison.write(output if output is not None else Path(loaded.run_dir or "runs/eval") / "eval.json")
    typer.echo(f"comparison: {written}")


async def _compare_adapters(config: Path, overrides: list[str], field: str, adapters: list[Path], tasks: int | None):
    """Each adapter on the same held-out tasks, a column each (named by its folder, or its path where two folders share
    a name), the baselines once; the last adapter is the column the others are compared with."""
    from ..trainer.evaluation import Comparison
    from ..trainer.loop import run_evaluation

    names = [path.name for path in adapters]
    labels = [path.name if names.count(path.name) == 1 else str(path) for path in adapters]
    columns, baselines = [], []
    for index, (path, label) in enumerate(zip(adapters, labels, strict=True)):
        loaded = _load(config, [*overrides, f"{field}.adapter_path={path}", *(["baselines={}"] if index else [])])
        model, *others = (await run_evaluation(loaded, limit=tasks)).columns
        columns.append(dataclasses.replace(model, label=label))
        baselines = baselines or others
    return Comparison([*columns, *baselines], subject=labels[-1])


def _at_least_one_task(tasks: int | None) -> None:
    """`--tasks 0` (or less) would run nothing and say nothing: one line and exit code 2 instead."""
    if tasks is not None and tasks < 1:
        typer.echo(f"error: --tasks {tasks}: give at least 1 task", err=True)
        raise typer.Exit(2)


def _trainable_field(config) -> str:
    """The config path of the only trainable model: `model`, or `models.<name>`."""
    return "model" if config.models is None else f"models.{next(iter(config.trainable_models()))}"


MARKERS = {"above": "▲", "below": "▼"}


def _print_comparison(title: str, comparison) -> None:
    """One row per metric, one column per policy (models, then baselines), each cell `mean [low, high]`.

    A marker in another column's cell says the subject's interval lies entirely above (▲) or below (▼) it.
    """
    from ..algorithms import METHODS_NOTE
    from ..logging import print_table

    markers = comparison.markers()
    labels = [column.label for column in comparison.columns]
    rows = []
    for name in _shown_metrics(comparison):
        row = {"metric": "reward" if name == "reward/mean" else name.removeprefix("workflow/")}
        for column in comparison.columns:
            found, side = column.estimates.get(name), markers.get(column.label, {}).get(name)
            row[column.label] = (
                None
                if found is None
                else f"{found.mean:.3f} [{found.low:.3f}, {found.high:.3f}]" + (f" {MARKERS[side]}" if side else "")
            )
        rows.append(row)
    rows.append({"metric": "episodes", **{column.label: str(column.episodes) for column in comparison.columns}})
    baselines = [column.label for column in comparison.columns if column.kind == "baseline"]
    caption = (
        f"mean [95 % interval] over the held-out episodes. ▲ / ▼: {comparison.subject}'s interval lies "
        "entirely above / below "
        "that column's (whether higher is better depends on the metric); only such a separation is called "
        "an improvement "
        "or a shortfall, overlapping intervals are no resolved difference. " + METHODS_NOTE
    )
    if baselines:
        caption += (
            f" Baselines (scripted policies in the trained model's place, never trained): {', '.join(baselines)}."
        )
    print_table(title, rows, ["metric", *labels], caption=caption)


def _shown_metrics(comparison) -> list[str]:
    """Mean reward, then the workflow's own metrics and win rates (per-agent and per-role rewards left out)."""
    names = {name for column in comparison.columns for name in column.estimates}
    shown = [
        name
        for name in sorted(names)
        if not (name.startswith(("agent/", "role/")) and not name.endswith("/win_rate"))
        and not name.startswith(("reward/", "time/"))
    ]
    return (["reward/mean"] if "reward/mean" in names else []) + shown
