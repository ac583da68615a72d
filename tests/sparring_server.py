"""A real `sparring serve` process on loopback, for the tests that talk to it over HTTP.

`serving(model_dir, directory, api_key, extra_args=())` starts the server (with any further
`sparring serve` options) on a free port
(checkpoints under `directory/checkpoints`, its output in
`directory/server.log`), waits until it answers, yields a `Served`, and
stops it afterwards. Used by the Tinker-protocol tests and the remote
training backend tests.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


@dataclass
class Served:
    """A running `sparring serve`."""

    url: str
    """Its base URL (what TINKER_BASE_URL takes)."""
    process: subprocess.Popen
    """The server process."""
    base_dir: Path
    """Where it keeps the checkpoints saved through the API."""
    log: Path
    """Its stdout and stderr."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(
    model_dir: str | Path, directory: Path, api_key: str, timeout_s: float = 180, extra_args: tuple[str, ...] = ()
) -> Iterator[Served]:
    port = free_port()
    log = directory / "server.log"
    base_dir = directory / "checkpoints"
    command = [
        sys.executable,
        "-m",
        "sparring.cli",
        "serve",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--api-key",
        api_key,
        "--base-dir",
        str(base_dir),
        *extra_args,
    ]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/api/v1/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"sparring serve did not come up:\n{log.read_text()}")
        time.sleep(0.3)
    try:
        yield Served(url=url, process=process, base_dir=base_dir, log=log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
