"""The commands around runs: `sparring new` (a game of your own), `sparring view` (a run's report), `sparring
export` (what a run trained, for peft / transformers / vLLM) and `sparring serve` (the Tinker and OpenAI-compatible
APIs on one base model)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..envs import new_game
from .common import _config_errors, app


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
    from ..logging import serve_report, write_report
    from ..logging.report import DEFAULT_ROLLOUT_STEPS

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
    from ..engine import export_adapter
    from ..trainer.checkpoints import final_adapters

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
    from ..models import sparring_home
    from ..server import ServerLimits, create_app, parse_served_base, serve_until_stopped
    from ..server.read_timeouts import ReadTimeouts

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
