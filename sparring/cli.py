"""`sparring` on the command line: train, debug-run, evaluate and serve.

    sparring train config.yaml [--set algorithm.learning_rate=3e-5] [--resume RUN_DIR]
    sparring run config.yaml --tasks 2        # episodes without training, transcripts printed
    sparring eval config.yaml [--adapter PATH] [--tasks 100] [--output metrics.json]
    sparring serve --model smollm2-135m-instruct --port 8000   # Tinker API under /api/v1, OpenAI chat under /v1
"""

from __future__ import annotations

import asyncio
import json
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
        _print_evaluations("Held-out evaluation (before -> after training)", result.evaluations)


@app.command()
def run(config: Path = CONFIG, overrides: List[str] = OVERRIDES, tasks: int = typer.Option(2, help="How many tasks to run."), split: str = typer.Option("train", help="train or eval tasks.")):
    """Run episodes without training and print every agent's transcript, reward and token counts."""
    episodes = asyncio.run(run_debug_episodes(_load(config, overrides), num_tasks=tasks, split=split))
    for episode in episodes:
        typer.echo(format_transcript(episode))
        typer.echo("")


@app.command("eval")
def evaluate(
    config: Path = CONFIG,
    overrides: List[str] = OVERRIDES,
    adapter: Optional[Path] = typer.Option(None, help="A saved PEFT adapter to evaluate instead of the base model (configs with one trainable model)."),
    tasks: Optional[int] = typer.Option(None, help="Evaluate on the first N eval tasks."),
    output: Optional[Path] = typer.Option(None, help="Also write every metric to this JSON file."),
):
    """Evaluate a model (base, or --adapter) on the held-out tasks."""
    loaded = _load(config, overrides)
    if adapter is not None:
        if len(loaded.trainable_models()) != 1:
            keys = sorted(loaded.trainable_models())
            typer.echo(f"error: --adapter needs a config with one trainable model; this one trains {keys}: use --set models.<name>.adapter_path=PATH", err=True)
            raise typer.Exit(2)
        loaded = _load(config, [*overrides, f"{_trainable_field(loaded)}.adapter_path={adapter}"])
    metrics = asyncio.run(run_evaluation(loaded, limit=tasks))
    _print_evaluations("Held-out evaluation", [metrics])
    if output is not None:
        output.write_text(json.dumps(metrics, indent=2))


def _trainable_field(config) -> str:
    """The config path of the only trainable model: `model`, or `models.<name>`."""
    return "model" if config.models is None else f"models.{next(iter(config.trainable_models()))}"


def _print_evaluations(title: str, evaluations: list[dict]) -> None:
    """One row per metric, one column per evaluation: fits a terminal whatever the number of metrics."""
    columns = [_short_eval_row(metrics) for metrics in evaluations]
    labels = [f"step {c.pop('step')}" if "step" in c else "value" for c in columns]
    names = list(dict.fromkeys(name for column in columns for name in column))
    rows = [{"metric": name, **{label: column.get(name) for label, column in zip(labels, columns)}} for name in names]
    print_table(title, rows, ["metric", *labels])


def _short_eval_row(metrics: dict) -> dict:
    """step, mean reward, the workflow's own metrics and win rates (per-agent and per-role rewards left out), with short names."""
    row = {"step": metrics["step"]} if "step" in metrics else {}
    row["reward"] = metrics.get("eval/reward/mean")
    for key, value in sorted(metrics.items()):
        name = key.removeprefix("eval/").removeprefix("workflow/")
        per_agent = name.startswith(("agent/", "role/")) and not name.endswith("/win_rate")
        if key.startswith("eval/") and not per_agent and not name.startswith(("reward/", "episodes", "time/")):
            row[name] = value
    row["episodes"] = metrics.get("eval/episodes")
    return row


@app.command()
def serve(
    model: str = typer.Option("smollm2-135m-instruct", help="Base model: catalogue name, Hugging Face directory or .gguf file."),
    port: int = typer.Option(8000, help="TCP port."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; anything but loopback needs --api-key."),
    api_key: Optional[str] = typer.Option(None, envvar="SPARRING_API_KEY", help="Key every request must carry (X-API-Key or Authorization: Bearer)."),
    device: str = typer.Option("cpu", help="torch device for the model ('cpu', 'cuda')."),
    base_dir: Optional[Path] = typer.Option(None, help="Where checkpoints saved through the API go (default $SPARRING_HOME/server)."),
):
    """Serve the Tinker training API (and the OpenAI-compatible chat API) on one base model."""
    import ipaddress

    import uvicorn

    from .server import create_app

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not api_key:
        typer.echo(f"error: refusing to serve on {host} without an API key; pass --api-key KEY (or set SPARRING_API_KEY)", err=True)
        raise typer.Exit(2)
    try:
        server_app = create_app(model, api_key=api_key, device=device, base_dir=base_dir)
    except (ValueError, RuntimeError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"serving {model} on http://{host}:{port} (Tinker API: TINKER_BASE_URL=http://{host}:{port})")
    uvicorn.run(server_app, host=host, port=port, log_level="warning")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
