"""`sparring` on the command line: train, debug-run and evaluate workflows from a YAML config.

    sparring train config.yaml [--set algorithm.learning_rate=3e-5] [--resume RUN_DIR]
    sparring run config.yaml --tasks 2        # episodes without training, transcripts printed
    sparring eval config.yaml [--adapter PATH] [--tasks 100]
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .logging import format_transcript, print_table
from .trainer import ConfigError, DatasetError, Job, load_config_file
from .trainer.loop import run_debug_episodes, run_evaluation

app = typer.Typer(add_completion=False, help="Train the LLM agents inside multi-agent workflows with RL.", no_args_is_help=True)

CONFIG = typer.Argument(..., help="The job's YAML config (see examples/guess_number.yaml).")
OVERRIDES = typer.Option([], "--set", help="Override a field: --set algorithm.learning_rate=3e-5 (repeatable).")


def _load(config: Path, overrides: list[str]):
    try:
        return load_config_file(config, overrides)
    except (ConfigError, DatasetError, FileNotFoundError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


@app.command()
def train(
    config: Optional[Path] = typer.Argument(None, help="The job's YAML config; not needed with --resume."),
    overrides: List[str] = OVERRIDES,
    resume: Optional[Path] = typer.Option(None, help="Continue the run in this directory from its latest checkpoint."),
):
    """Train the workflow's trainable agents."""
    if resume is not None:
        config = resume / "config.yaml"
    if config is None:
        typer.echo("error: give a config file, or --resume RUN_DIR", err=True)
        raise typer.Exit(2)
    try:
        result = Job.from_config(_load(config, overrides)).tune(resume=str(resume) if resume else None)
    except KeyboardInterrupt:
        # The loop saved a checkpoint before the interrupt reached us.
        typer.echo("interrupted: checkpoint saved; continue with `sparring train --resume RUN_DIR`", err=True)
        raise typer.Exit(130) from None
    state = "interrupted (checkpoint saved)" if result.interrupted else "done"
    typer.echo(f"{state}: {result.steps} steps in {result.run_dir}")
    for name, path in result.sampler_paths.items():
        typer.echo(f"  {name}: {path}")
    if result.evaluations:
        rows = [_short_eval_row(row) for row in result.evaluations]
        print_table("Held-out evaluation (before -> after training)", rows, list(rows[0]))


@app.command()
def run(config: Path = CONFIG, overrides: List[str] = OVERRIDES, tasks: int = typer.Option(2, help="How many tasks to run."), split: str = typer.Option("train", help="train or eval tasks.")):
    """Run episodes without training and print every agent's transcript, reward and token counts."""
    episodes = asyncio.run(run_debug_episodes(_load(config, overrides), num_tasks=tasks, split=split))
    for episode in episodes:
        typer.echo(format_transcript(episode))
        typer.echo("")


@app.command("eval")
def evaluate(config: Path = CONFIG, overrides: List[str] = OVERRIDES, adapter: Optional[Path] = typer.Option(None, help="A saved PEFT adapter to evaluate instead of the base model."), tasks: Optional[int] = typer.Option(None, help="Evaluate on the first N eval tasks.")):
    """Evaluate a model (base, or --adapter) on the held-out tasks."""
    extra = [f"model.adapter_path={adapter}"] if adapter else []
    metrics = asyncio.run(run_evaluation(_load(config, [*overrides, *extra]), limit=tasks))
    row = _short_eval_row(metrics)
    print_table("Held-out evaluation", [row], list(row))


def _short_eval_row(metrics: dict) -> dict:
    """step, mean reward and the workflow's own metrics, with short column names."""
    row = {"step": metrics["step"]} if "step" in metrics else {}
    row["reward"] = metrics.get("eval/reward/mean")
    row.update({key.removeprefix("eval/workflow/"): value for key, value in sorted(metrics.items()) if key.startswith("eval/workflow/")})
    row["episodes"] = metrics.get("eval/episodes")
    return row


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
