"""`sparring` on the command line: train, debug-run, evaluate, serve, view a run, export what it trained, start a game.

    sparring train config.yaml [--set algorithm.learning_rate=3e-5] [--resume RUN_DIR | --overwrite]
    sparring train --conf config.yaml         # the same (AgentJet's spelling)
    sparring train guess_number               # a packaged game's name: its default config
    sparring train guess_number --steps 2 --eval-tasks 8   # a short run
    sparring run config.yaml --tasks 2        # episodes without training, transcripts printed
    sparring eval config.yaml [--adapter PATH] [--tasks 100] [--output comparison.json]
    sparring eval config.yaml --adapter A --adapter B ...   # several adapters (a run's snapshots) side by side
    sparring serve --model smollm2-135m-instruct --port 8000   # Tinker API under /api/v1, OpenAI chat under /v1
    sparring view RUN_DIR [-o report.html] [--serve]          # one HTML file: curves, evaluation, token-level rollouts
    sparring export RUN_DIR OUT [--merged]                     # the adapter or merged model, for peft/transformers/vLLM
    sparring new NAME [--dir PARENT]                           # a game of your own in NAME/, ready to train

Wherever a config file goes, a game's name (`sparring.envs.GAMES`) may stand instead.
A bad config -- a field, the file, the workflow's import path, a dataset file,
a model's path or name, a device -- is one line on stderr (`error: ` and the
field path, what is wrong and what would work) and exit code 2, found before
any model loads and before a run directory is left behind. A training run
stopped because every episode failed (`EpisodesFailingError`: too many such
steps in a row, or all of them), because no step trained a token
(`NothingTrainedError`), because a checkpoint is damaged or weights went NaN
(`CheckpointError`) or because a file could not be written (a full disk) is
one line with the reason and exit code 1, and so is a `sparring run` in which
episodes failed (a run in which no trainable agent spoke warns). Ctrl-C / SIGTERM stop a run with a
checkpoint of its last completed step, one line with the resume command and
exit code 130 / 143. The config is read and checked before torch and the
trainer are imported (the commands import what they need), so a malformed one
is reported at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from .envs import GAMES, load_config, new_game
from .trainer.dataset_layout import DatasetError
from .trainer.lingering import lingering_threads
from .trainer.schema import ConfigError

# Everything else (torch, transformers, the engine, the trainer) is imported inside the commands, after the config
# checked out: a bad config is reported in a fraction of a second, not after seconds of imports.


def _flags_without_a_type(option_class: type) -> None:
    """`--help` lists a flag (`--overwrite`, `--help`) bare, not as `--overwrite <bool>`: it takes no value."""
    shown = option_class.display_type_rich

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    option_class.display_type_rich = display_type_rich


if hasattr(typer.core, "TyperOption") and hasattr(typer.core.TyperOption, "display_type_rich"):
    _flags_without_a_type(typer.core.TyperOption)

app = typer.Typer(
    add_completion=False, help="Train the LLM agents inside multi-agent workflows with RL.", no_args_is_help=True
)

_GAME_NAMES = ", ".join(GAMES)
CONFIG = typer.Argument(
    ..., help=f"The job's YAML config, or a game's name for its default config ({', '.join(GAMES)})."
)
OVERRIDES = typer.Option(
    [], "--set", metavar="<field=value>", help="Override a field: --set algorithm.learning_rate=3e-5 (repeatable)."
)


def _show_version(shown: bool) -> None:
    if shown:
        typer.echo(f"sparring {importlib.metadata.version('sparring')}")
        raise typer.Exit()


_EVERY_CONFIG_SETS: list[str] = []
"""Overrides the global options put on every config this invocation loads (--quiet: no progress display)."""


@app.callback()
def options(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Print sparring's version and exit."
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No progress bars or lines and no warnings: only results and errors."
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Also sparring's informational lines (model loads and conversions, resumes)."
    ),
):
    """Train the LLM agents inside multi-agent workflows with RL."""
    _EVERY_CONFIG_SETS[:] = ["logging.console=false"] if quiet else []
    logging.getLogger().setLevel(logging.ERROR if quiet else logging.WARNING)
    logging.getLogger("sparring").setLevel(logging.ERROR if quiet else logging.INFO if verbose else logging.NOTSET)


@contextmanager
def _config_errors(source: Path | None = None) -> Iterator[None]:
    """A config or dataset error becomes `error: [source: ]message` on one stderr line and exit code 2."""
    try:
        yield
    except (ConfigError, DatasetError) as error:
        message = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
        typer.echo(f"error: {source}: {message}" if source is not None else f"error: {message}", err=True)
        raise typer.Exit(2) from None


def _load(config: Path, overrides: list[str]):
    with _config_errors():  # the messages of a file name it already
        return load_config(config, [*overrides, *_EVERY_CONFIG_SETS])


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
    from .trainer import CheckpointError, EpisodesFailingError, Job, NothingTrainedError

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
    from .trainer import CheckpointError
    from .trainer.checkpoints import latest_checkpoint

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
    from .logging import format_transcript
    from .trainer.loop import run_debug_episodes

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
    from .trainer.loop import run_evaluation

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
    from .trainer.evaluation import Comparison
    from .trainer.loop import run_evaluation

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
    from .algorithms import METHODS_NOTE
    from .logging import print_table

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


@app.command()
def new(
    name: str = typer.Argument(
        ..., help="The game's name: a Python name; it names the folder and the workflow function."
    ),
    directory: Path = typer.Option(Path("."), "--dir", help="Where to create the game's folder."),
):
    """Create a game of your own (workflow, rules, tasks, baselines, config.yaml, data/) that trains as it is."""
    with _config_errors():
        folder = new_game(name, directory)
    typer.echo(f"created {folder}/: workflow.py, rules.py, tasks.py, baselines.py, config.yaml, data/")
    typer.echo(f"  sparring run {folder}/config.yaml --tasks 2")
    typer.echo(f"  sparring train {folder}/config.yaml --steps 2 --eval-tasks 8")


@app.command()
def view(
    run_dir: Path = typer.Argument(..., help="A run directory (what `sparring train` wrote)."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Where to write the report; default RUN_DIR/report.html."
    ),
    serve: bool = typer.Option(
        False, "--serve", help="Serve the report instead, rendered afresh on every request (follows a run live)."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to serve on (with --serve)."),
    port: int = typer.Option(8050, help="TCP port to serve on (with --serve)."),
    rollout_steps: int | None = typer.Option(
        None,
        help="Put in the rollouts of at most this many steps (evenly spread, the last included; default: the "
        "report's, 24); 0: all.",
    ),
):
    """Write a run's report: one self-contained HTML file with its curves, evaluation tables and token-level
    rollouts."""
    if not run_dir.is_dir():
        typer.echo(f"error: {run_dir} is not a run directory", err=True)
        raise typer.Exit(2)
    from .logging import serve_report, write_report
    from .logging.report import DEFAULT_ROLLOUT_STEPS

    if rollout_steps is None:
        rollout_steps = DEFAULT_ROLLOUT_STEPS
    if serve:
        server = serve_report(run_dir, host, port, rollout_steps=rollout_steps or None)
        typer.echo(f"serving the report of {run_dir} on http://{host}:{server.server_address[1]} (Ctrl-C stops)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return
    typer.echo(f"report: {write_report(run_dir, output, rollout_steps=rollout_steps or None)}")


@app.command()
def export(
    source: Path = typer.Argument(
        ..., help="A run directory (its final adapter is exported), or an adapter directory."
    ),
    out: Path = typer.Argument(..., help="A new directory to write."),
    merged: bool = typer.Option(
        False, "--merged", help="Fold the adapter into the base weights: a whole Hugging Face model directory."
    ),
    model: str | None = typer.Option(None, help="Which trainable model, for runs that train several."),
):
    """Export a trained adapter for peft (`AutoPeftModelForCausalLM`), or merged into a model for transformers /
    vLLM / llama.cpp."""
    from .engine import export_adapter
    from .trainer.checkpoints import final_adapters

    try:
        adapters = {"adapter": source} if (source / "adapter_config.json").is_file() else final_adapters(source)
        if model is not None and model not in adapters:
            raise ValueError(f"--model {model!r}: the run trains {sorted(adapters)}")
        if model is None and len(adapters) > 1:
            raise ValueError(f"the run trains {sorted(adapters)}; choose one with --model")
        adapter = adapters[model] if model is not None else next(iter(adapters.values()))
        written = export_adapter(adapter, out, merged=merged)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    kind = (
        "merged model (load with AutoModelForCausalLM.from_pretrained)"
        if merged
        else "adapter (load with AutoPeftModelForCausalLM.from_pretrained)"
    )
    typer.echo(f"{kind}: {written}")


@app.command()
def serve(
    model: list[str] = typer.Option(
        ["smollm2-135m-instruct"],
        metavar="<model>",
        help="Base model: catalogue name, Hugging Face directory or .gguf file; NAME=SOURCE serves it under NAME "
        "(repeatable: every NAME answers with the one model loaded, e.g. --model "
        "Qwen/Qwen3.5-9B=smollm2-135m-instruct).",
    ),
    port: int = typer.Option(8000, help="TCP port."),
    host: str = typer.Option(
        "127.0.0.1", help="Address to bind; anything but loopback (127.0.0.1, ::1, localhost) needs --api-key."
    ),
    api_key: str | None = typer.Option(
        None,
        envvar="SPARRING_API_KEY",
        help="Key every request must carry (X-API-Key or Authorization: Bearer). Without one, ANY key (or none) "
        "is accepted, "
        "so the server refuses to bind beyond loopback: everyone who can reach a loopback port can use it.",
    ),
    device: str = typer.Option("cpu", help="torch device for the model ('cpu', 'cuda')."),
    base_dir: Path | None = typer.Option(
        None,
        help="Where checkpoints saved through the API go (default $SPARRING_HOME/server); no client can read or "
        "write outside it.",
    ),
    adapter: list[str] = typer.Option(
        [],
        metavar="<name=path>",
        help="NAME=PATH: also serve the PEFT adapter at PATH as model NAME on the OpenAI API (repeatable).",
    ),
    max_request_tokens: int | None = typer.Option(
        None,
        min=1,
        help="Most tokens one request may make the engine process: prompt + samples x max_tokens, or a "
        "forward_backward batch (default 1048576).",
    ),
    drain_s: float | None = typer.Option(
        None,
        min=0.0,
        help="On SIGTERM, seconds in-flight requests may still finish before they are cancelled and the server "
        "exits (default 10).",
    ),
    header_timeout_s: float | None = typer.Option(
        None, min=0.001, help="Seconds a client may take to send a request's headers; then it is closed (default 10)."
    ),
    body_timeout_s: float | None = typer.Option(
        None, min=0.001, help="Seconds a client may take to send a request's body after its headers (default 120)."
    ),
    tokenizer_cache: Path | None = typer.Option(
        None,
        help="Hugging Face hub cache to write each served name's tokenizer into (default $SPARRING_HOME/hub), "
        "so a client "
        "that loads tokenizers by model name finds them offline with HF_HUB_CACHE=DIR HF_HUB_OFFLINE=1; "
        "real entries are never touched.",
    ),
):
    """Serve the Tinker training API (and the OpenAI-compatible chat API) on one base model, under one or more names.

    Every request is bounded before it is accepted (context length, --max-request-tokens, LoRA rank, names), each
    Tinker session sees only its own models, samplers, requests and checkpoints, and SIGTERM drains for --drain-s.
    """
    from .models import sparring_home
    from .server import ServerLimits, create_app, parse_served_base, serve_until_stopped
    from .server.read_timeouts import ReadTimeouts

    host = host.removeprefix("[").removesuffix("]")  # [::1] as a URL writes it
    if not _is_loopback(host) and not api_key:
        typer.echo(
            f"error: refusing to serve on {host} without an API key; pass --api-key KEY (or set SPARRING_API_KEY)",
            err=True,
        )
        raise typer.Exit(2)
    named = [entry.partition("=") for entry in adapter]
    if any(not name or not sep or not path for name, sep, path in named):
        typer.echo(f"error: --adapter takes NAME=PATH, got {adapter}", err=True)
        raise typer.Exit(2)
    given = {"max_request_tokens": max_request_tokens, "drain_s": drain_s}
    given |= {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s}
    limits = ServerLimits(**{name: value for name, value in given.items() if value is not None})
    tokenizer_cache = tokenizer_cache or sparring_home() / "hub"
    try:
        base = parse_served_base(model)
        adapters = {name: path for name, _, path in named}
        server_app = create_app(
            base.source,
            api_key=api_key,
            device=device,
            base_dir=base_dir,
            limits=limits,
            adapters=adapters,
            served_names=base.names,
            tokenizer_cache=tokenizer_cache,
        )
    except (ValueError, RuntimeError, OSError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    served = base.source if base.names == [base.source] else f"{base.source} as {', '.join(base.names)}"
    typer.echo(
        f"serving {served} on http://{host}:{port} (Tinker API: TINKER_BASE_URL=http://{host}:{port})"
        + ("" if api_key else "; no API key: any key is accepted")
    )
    for entry in server_app.state.tokenizer_entries:
        markers = (
            f" ({', '.join(f'{text} = token {token}' for text, token in entry.markers.items())})"
            if entry.markers
            else ""
        )
        typer.echo(
            f"tokenizer of {entry.name}: not written, {entry.skipped}"
            if entry.skipped
            else f"tokenizer of {entry.name}: {entry.snapshot}{markers}"
        )
    if any(not entry.skipped for entry in server_app.state.tokenizer_entries):
        typer.echo(
            f"clients find these tokenizers by name offline with: HF_HUB_CACHE={tokenizer_cache} HF_HUB_OFFLINE=1"
        )
    timeouts = ReadTimeouts(header_s=limits.header_timeout_s, body_s=limits.body_timeout_s)
    serve_until_stopped(server_app, host, port, server_app.state.drain_clock, timeouts)


def _is_loopback(host: str) -> bool:
    """Whether `host` reaches this machine only: localhost, 127.0.0.0/8 in any form the resolver reads (127.1), ::1."""
    import ipaddress
    import socket

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.inet_aton(host)).is_loopback
    except OSError:
        return False


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except SystemExit as done:
        if not lingering_threads():
            raise
        # Python would wait for these at exit, for ever if a workflow left them running: exit without waiting.
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
