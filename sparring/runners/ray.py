"""The Ray runner: each episode's workflow runs as a Ray task, its model calls come back to the trainer.

`runner: {backend: ray}` makes `RayRunner.play` the runner's `EpisodePlayer`
(`registry.py`; see `sparring.rollout.player`): everything around the workflow — the
recorder, rewards and the judge, timelines, error episodes — stays in the
trainer, exactly as in process; only the workflow function moves to a Ray
worker, so heavy environments (tools, sandboxes, simulators) spread over the
cluster's cores and machines. Its models are `RemoteChatModel`s that send
each call back over an `EpisodeLink` to the trainer's `ModelCallServer`,
where the trainer's own chat models sample and record it (see
`episode_link`): the sampler still batches every episode's calls, and the
trained tokens and logprobs are the sampled ones.

Why HTTP to the trainer and not a Ray actor: an actor is always a process of
its own, never the trainer, so a call would take two hops and still need a
channel into the trainer's event loop; a plain HTTP server in the trainer is
one hop from any node, with the episode's key as the credential.

A Ray task of an episode (`_play_on_worker`) loads the workflow, tells the
trainer it has started, and plays it with the in-process player (its own
timeout, measured from its own start, not from time queued for a worker).
Its `WorkerOutcome` carries the output, or the exception (as raised, when it
survives pickling), or the timeout. A worker that cannot stop the workflow (a
blocking call that ignores cancellation) is force-cancelled by the trainer a
grace period after the timeout and abandoned; tasks are never retried (their
calls were already recorded). A workflow that cannot be pickled, or cannot
be loaded on a worker, is the runner's failure (`WorkflowNotSendableError`),
not an episode's, and so is a worker that cannot reach the trainer
(`RunnerError`): the run stops and says why.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import threading
import traceback
import weakref
from dataclasses import dataclass
from typing import Any

try:
    import ray
    from ray import cloudpickle
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("runner.backend 'ray' needs Ray, which is not installed: pip install 'sparring[ray]'") from error

from ..rollout.player import play_in_process
from ..rollout.recorder import EpisodeRecorder, current_recorder, recording
from ..rollout.runner import RunnerError
from ..rollout.workflow import EpisodeFn, ModelRouter
from .episode_link import EpisodeLink, ModelCallServer, RemoteTunerSpec

log = logging.getLogger(__name__)

BACKSTOP_GRACE_S = 2.0
"""After a started episode's timeout, how long the trainer waits for the worker to report it before killing the task."""

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class WorkflowNotSendableError(RunnerError, TypeError):
    """The workflow cannot be pickled for, or loaded on, a Ray worker."""


@dataclass
class WorkerOutcome:
    """What the Ray task of one episode sends back."""

    pid: int
    """The worker process that ran the workflow."""
    output: Any = None
    """The workflow's return value (checked by the runner, as in process)."""
    error: Exception | None = None
    """The exception the workflow raised (a `RemoteEpisodeError` naming it when it does not survive pickling)."""
    traceback: str = ""
    """The worker's traceback of `error`, for the trainer's debug log."""
    timed_out: bool = False
    """True when the workflow ran past the episode's timeout on the worker."""
    load_error: str | None = None
    """Why the worker could not load the workflow; the run stops."""
    unreachable: str | None = None
    """Why the worker could not reach the trainer's model-call server; the run stops."""


class RemoteEpisodeError(RuntimeError):
    """A workflow's exception that cannot be pickled back from the worker; its message names the original type."""


def check_sendable(episode_fn: EpisodeFn) -> bytes:
    """The workflow pickled for Ray workers, or a `WorkflowNotSendableError` saying why it cannot be."""
    try:
        return cloudpickle.dumps(episode_fn)
    except Exception as error:  # noqa: BLE001 - any pickling failure means the same thing here
        raise WorkflowNotSendableError(
            "runner.backend is 'ray' but the workflow cannot be pickled to send to Ray workers: "
            f"{type(error).__name__}: {error}. "
            "Keep unpicklable state (locks, open files, clients, loaded models) out of the workflow and "
            "its closure; create it inside the episode."
        ) from error


class RayRunner:
    """Plays episodes as Ray tasks on one cluster, with one model-call server for their workers."""

    def __init__(self, address: str | None = None, num_cpus: float = 1.0) -> None:
        if not ray.is_initialized():
            ray.init(
                address=address, include_dashboard=False
            )  # address None: a new local cluster (all of this machine's CPUs)
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        largest = max((node.get("Resources", {}).get("CPU", 0.0) for node in nodes), default=0.0)
        if num_cpus > largest:
            raise ValueError(
                f"runner.ray_num_cpus is {num_cpus:g} but the largest node of the Ray cluster has "
                f"{largest:g} CPUs: no episode could ever be scheduled"
            )
        self.num_cpus = num_cpus
        self.server = ModelCallServer(host=self._reachable_host(address, nodes))
        self._task = ray.remote(max_retries=0)(_play_on_worker)
        self._workflows: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @staticmethod
    def _reachable_host(address: str | None, nodes: list[dict]) -> str:
        """Loopback for a local cluster (every node is this machine); else this node's IP, which the cluster reaches."""
        here = ray.util.get_node_ip_address()
        if address is None and all(node.get("NodeManagerAddress") in (*_LOOPBACK, here) for node in nodes):
            return "127.0.0.1"
        return here

    def workflow_ref(self, episode_fn: EpisodeFn):
        """The pickled workflow in Ray's object store, put there once per workflow."""
        ref = self._workflows.get(episode_fn)
        if ref is None:
            ref = self._workflows[episode_fn] = ray.put(check_sendable(episode_fn))
        return ref

    async def play(self, episode_fn: EpisodeFn, task: dict, tuner: ModelRouter, timeout_s: float) -> Any:
        """The runner's `EpisodePlayer`: run the workflow on a Ray worker, its calls recorded on this episode's
        recorder."""
        recorder = current_recorder()
        if recorder is None:
            raise RunnerError(
                "RayRunner.play runs inside an episode's recorder: pass it to the runner as RunnerSettings.play"
            )
        workflow = self.workflow_ref(episode_fn)
        session, spec = self.server.open(tuner, recorder)
        ref = self._task.options(num_cpus=self.num_cpus).remote(workflow, task, spec, timeout_s)
        try:
            outcome: WorkerOutcome = await self._outcome(ref, session.started, timeout_s)
        finally:
            self.server.close(session)
        if outcome.load_error is not None:
            raise WorkflowNotSendableError(
                f"a Ray worker (pid {outcome.pid}) could not load the workflow: {outcome.load_error}. "
                "Its module must be importable on every node (install it there, or pass runtime_env to ray.init)."
            )
        if outcome.unreachable is not None:
            raise RunnerError(
                f"a Ray worker (pid {outcome.pid}) could not reach the trainer's model-call server at "
                f"{spec.base_url}: {outcome.unreachable}. "
                "Every node of the cluster must be able to connect to this machine at that address."
            )
        if outcome.timed_out:
            raise asyncio.TimeoutError
        if outcome.error is not None:
            log.debug(
                "episode of task %s raised on worker %d:\n%s", task.get("task_id"), outcome.pid, outcome.traceback
            )
            raise outcome.error
        return outcome.output

    async def _outcome(self, ref, started: asyncio.Event, timeout_s: float) -> WorkerOutcome:
        result = asyncio.ensure_future(_awaitable(ref))
        begun = asyncio.ensure_future(started.wait())
        try:
            await asyncio.wait({result, begun}, return_when=asyncio.FIRST_COMPLETED)
            if not result.done():  # started and running: the worker enforces the timeout, this is the backstop
                await asyncio.wait_for(asyncio.shield(result), timeout_s + BACKSTOP_GRACE_S)
            return result.result()
        except ray.exceptions.RayTaskError as error:
            cause = error.cause if isinstance(getattr(error, "cause", None), Exception) else None
            raise (cause or error) from None
        except (asyncio.TimeoutError, asyncio.CancelledError):
            _abandon(ref, result)
            raise
        finally:
            begun.cancel()


def _awaitable(ref):
    return asyncio.wrap_future(ref.future())


def _abandon(ref, result: asyncio.Future) -> None:
    """Kill a task the trainer no longer waits for (its worker process is replaced) and drop its result."""
    ray.cancel(ref, force=True)
    result.cancel()


_RUNNERS: dict[tuple, RayRunner] = {}
_RUNNERS_LOCK = threading.Lock()


def ray_runner(address: str | None = None, num_cpus: float = 1.0) -> RayRunner:
    """This process's runner for a Ray cluster (created on first use; Ray is started or joined then)."""
    with _RUNNERS_LOCK:
        key = (address, num_cpus)
        if key in _RUNNERS and not ray.is_initialized():  # Ray was shut down since: start again
            _RUNNERS.pop(key).server.stop()
        if key not in _RUNNERS:
            _RUNNERS[key] = RayRunner(address, num_cpus)
        return _RUNNERS[key]


def _play_on_worker(workflow: bytes, task: dict, spec: RemoteTunerSpec, timeout_s: float) -> WorkerOutcome:
    """The Ray task of one episode: load the workflow, play it against the trainer's models, report."""
    try:
        episode_fn = cloudpickle.loads(workflow)
    except Exception as error:  # noqa: BLE001 - reported to the trainer, which stops the run
        return WorkerOutcome(os.getpid(), load_error=f"{type(error).__name__}: {error}")
    return asyncio.run(_play(episode_fn, task, spec, timeout_s))


async def _play(episode_fn: EpisodeFn, task: dict, spec: RemoteTunerSpec, timeout_s: float) -> WorkerOutcome:
    async with EpisodeLink(spec.base_url, spec.key) as link:
        try:
            await link.start()
        except Exception as error:  # noqa: BLE001 - reported to the trainer, which stops the run
            return WorkerOutcome(os.getpid(), unreachable=f"{type(error).__name__}: {error}")
        # A recorder of the worker's own, so tuner.as_base_url_api_key(...) works here too (its keys end with it).
        with recording(EpisodeRecorder()):
            try:
                output = await play_in_process(episode_fn, task, spec.tuner(link), timeout_s)
            except asyncio.TimeoutError:
                return WorkerOutcome(os.getpid(), timed_out=True)
            except Exception as error:  # noqa: BLE001 - an episode's failure is data, judged by the trainer
                return WorkerOutcome(os.getpid(), error=_sendable(error), traceback=traceback.format_exc())
    return WorkerOutcome(os.getpid(), output=output)


def _sendable(error: Exception) -> Exception:
    """`error` itself when it survives pickling (same type, same message), else a `RemoteEpisodeError` naming it."""
    try:
        copy = pickle.loads(cloudpickle.dumps(error))
        if type(copy) is type(error) and str(copy) == str(error):
            return error.with_traceback(None)
    except Exception:  # noqa: BLE001 - any failure means it does not travel
        pass
    return RemoteEpisodeError(f"{type(error).__name__}: {error}")
