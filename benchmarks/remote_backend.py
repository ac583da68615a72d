"""Remote training backend: the cost of reaching the model over the Tinker protocol.

The same RL step of guess-the-number (episodes, advantages, forward_backward,
optim_step) runs two ways in one process, on the same task batches:

- local: the model on an engine inside this process (backend 'local');
- remote: the model inside a `sparring serve` process on loopback, reached
  through the real tinker SDK (backend 'tinker'): every sample, training call
  and in-flight weight publication is an HTTP request, and the tokens are
  rendered and parsed here.

Steps alternate (local, remote, local, ...) so that load from other processes
hits both alike; the first step of each is a warm-up and not counted. It
prints the median seconds per step of each, their split into rollout and
training time, and the ratio. Both use the same CPU cores: the server is
another process on this machine, so this measures protocol and process
overhead, not a faster machine.

    .venv/bin/python benchmarks/remote_backend.py [--steps 5] [--group 4] [--batch 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import print_table, resolve_model_name

from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig
from sparring.envs.guess_number import guess_number, make_tasks
from sparring.rollout import RunnerSettings, as_episode_fn
from sparring.trainer import TuneConfig
from sparring.trainer.resolve import build_models
from sparring.trainer.step import learn, run_rollout

API_KEY = "tml-benchmark"


def start_server(model: str, directory: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "sparring.cli",
        "serve",
        "--model",
        model,
        "--port",
        str(port),
        "--api-key",
        API_KEY,
        "--base-dir",
        str(directory / "server"),
    ]
    process = subprocess.Popen(command, stdout=open(directory / "server.log", "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"{url}/api/v1/healthz", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"sparring serve did not start:\n{(directory / 'server.log').read_text()}")
        time.sleep(0.5)


def job(model: TunerModelConfig, args, run_dir: Path) -> TuneConfig:
    algorithm = AlgorithmConfig(
        group_size=args.group, batch_size=args.batch, learning_rate=5e-4, drop_zero_variance_groups=False
    )
    dataset = DatasetConfig(tasks=[{"secret": 1}], workflow_args={"low": 1, "high": 16, "max_turns": args.turns})
    return TuneConfig(
        model=model,
        algorithm=algorithm,
        train_dataset=dataset,
        run_dir=str(run_dir),
        logging=LoggingConfig(console=False, tensorboard=False),
    )


async def measure(args, model_name: str, url: str, directory: Path) -> dict[str, list[dict]]:
    common = {"model_path": model_name, "max_tokens": args.max_tokens, "lora_rank": 16}
    configs = {
        "local": job(TunerModelConfig(**common), args, directory / "local"),
        "remote": job(
            TunerModelConfig(**common, backend="tinker", base_url=url, api_key=API_KEY), args, directory / "remote"
        ),
    }
    models = {name: build_models(config, directory / name) for name, config in configs.items()}
    episode_fn = as_episode_fn(guess_number)
    settings = RunnerSettings(group_size=args.group, max_concurrency=64, episode_timeout_s=600, error_reward=-0.1)
    tasks = make_tasks("train", args.batch * (args.steps + 1), seed=7)
    for task in tasks:
        task["workflow_args"] = {"low": 1, "high": 16, "max_turns": args.turns}
    timings: dict[str, list[dict]] = {name: [] for name in configs}
    for step in range(args.steps + 1):
        batch = tasks[step * args.batch : (step + 1) * args.batch]
        for name in ("local", "remote"):
            models[name].reseed(0, step)
            started = time.perf_counter()
            episodes = await run_rollout(
                episode_fn, batch, models[name].make_training_tuner, settings, None, step, seed=0
            )
            rollout_s = time.perf_counter() - started
            metrics = await learn(episodes, models[name], settings, configs[name], None, step, args.steps + 1)
            row = {
                "step_s": time.perf_counter() - started,
                "rollout_s": rollout_s,
                "train_s": metrics["time/train"],
                "tokens": metrics.get("tokens/trained", 0.0),
            }
            print(
                f"step {step} {name:6s} {row['step_s']:.2f} s (rollout {row['rollout_s']:.2f}, train "
                f"{row['train_s']:.2f})",
                flush=True,
            )
            if step > 0:  # the first step of each warms up
                timings[name].append(row)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per backend (after one warm-up step each)")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--turns", type=int, default=3, help="guesses per episode")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="tiny random model, 2 steps: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.steps = 2
    model_name = resolve_model_name(args.model, args.quick)
    directory = Path(tempfile.mkdtemp(prefix="sparring-remote-bench-"))
    print(f"load average before: {os.getloadavg()}", flush=True)
    server, url = start_server(model_name, directory)
    try:
        timings = asyncio.run(measure(args, model_name, url, directory))
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"load average after: {os.getloadavg()}")
    median = {
        name: {key: statistics.median(row[key] for row in rows) for key in rows[0]} for name, rows in timings.items()
    }
    rows = [[name, m["step_s"], m["rollout_s"], m["train_s"]] for name, m in median.items()]
    print(
        f"\nguess the number on {args.model if not args.quick else 'the tiny model'}: group {args.group} x "
        f"batch {args.batch}, {args.turns} turns, max_tokens {args.max_tokens}; median of {args.steps} "
        "steps"
    )
    print_table(["backend", "s/step", "rollout s", "train s"], rows)
    print(
        f"remote / local: {median['remote']['step_s'] / median['local']['step_s']:.2f}x per step "
        f"(rollout {median['remote']['rollout_s'] / median['local']['rollout_s']:.2f}x, train "
        f"{median['remote']['train_s'] / median['local']['train_s']:.2f}x)"
    )


if __name__ == "__main__":
    main()
