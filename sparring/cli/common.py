"""What every `sparring` command shares: the Typer app and its global options (`--version`, `--quiet`, `--verbose`),
the config argument and `--set`, and a bad config or dataset as one line on stderr and exit code 2."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from ..envs import GAMES, load_config
from ..trainer.dataset import DatasetError
from ..trainer.schema import ConfigError

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
