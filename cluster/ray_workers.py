"""Workers as Ray actors across the nodes of an existing Ray cluster (`DisaggConfig.ray_address`).

`RayPlacement` connects to the cluster, reserves one placement-group bundle per worker (strategy SPREAD:
across nodes where there are several) and, when the model is a local path, puts its files in the object
store once, since nodes share no filesystem. `RayWorker` is the router's view of one actor, with the face
of `pool.WorkerProcess`: `send` (ordered by a sequence number: a threaded actor may run calls out of
order), a reader thread that long-polls the actor's outbox and hands each message to `on_message`, and
`on_exit` once when the actor dies or its loop ends. The actor (`WorkerActor`) runs the same `worker.serve`
loop as a local worker process, on a thread, over an in-memory channel fed by those calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipe.cluster import messages as m
from recipe.cluster.worker import WorkerSpec, serve

PULL_WAIT_S = 0.5


class ActorChannel:
    """The worker loop's channel inside an actor: `push` feeds it (in sequence order), `pull` drains it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inbox: deque[Any] = deque()
        self._early: dict[int, Any] = {}
        self._next = 0
        self._outbox: list[Any] = []
        self.done = False
        self.error: str | None = None

    # the worker loop's side
    def send(self, msg: Any) -> None:
        with self._cond:
            self._outbox.append(msg)
            self._cond.notify_all()

    def poll(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: bool(self._inbox), timeout)

    def recv(self) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._inbox))
            return self._inbox.popleft()

    # the router's side
    def push(self, seq: int, msg: Any) -> None:
        with self._cond:
            self._early[seq] = msg
            while self._next in self._early:
                self._inbox.append(self._early.pop(self._next))
                self._next += 1
            self._cond.notify_all()

    def pull(self, timeout: float) -> tuple[list[Any], bool, str | None]:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._outbox) or self.done, timeout)
            out, self._outbox = self._outbox, []
            return out, self.done and not self._outbox, self.error

    def finish(self, error: str | None) -> None:
        with self._cond:
            self.done, self.error = True, error
            self._cond.notify_all()


def pack_model(path: str) -> dict[str, bytes]:
    """A checkpoint directory's (or a single model file's) files, by path relative to it."""
    p = Path(path)
    if p.is_file():
        return {p.name: p.read_bytes()}
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def unpack_model(files: dict[str, bytes], single_file: bool) -> tuple[str, str]:
    """Write shipped model files to a fresh local dir: (the model path to load, the dir to remove)."""
    root = tempfile.mkdtemp(prefix="recipe-model-")
    for rel, data in files.items():
        dst = Path(root) / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
    return (str(Path(root) / next(iter(files))) if single_file else root), root


class WorkerActor:
    """The actor class (wrapped by `ray.remote` at run time, so importing this module needs no Ray)."""

    def __init__(self) -> None:
        self.channel = ActorChannel()
        self.thread: threading.Thread | None = None

    def where(self) -> tuple[int, str, str]:
        import ray

        ctx = ray.get_runtime_context()
        return os.getpid(), ctx.get_node_id(), ray.util.get_node_ip_address()

    def start(self, spec: WorkerSpec, model_files: dict[str, bytes] | None, single_file: bool) -> None:
        self.thread = threading.Thread(target=self._serve, args=(spec, model_files, single_file),
                                       name="recipe-ray-worker", daemon=True)
        self.thread.start()

    def _serve(self, spec: WorkerSpec, model_files: dict[str, bytes] | None, single_file: bool) -> None:
        local = None
        error = None
        try:
            if model_files is not None:
                path, local = unpack_model(model_files, single_file)
                spec = dataclasses.replace(spec, model=path)
            serve(spec, self.channel)
        except BaseException as exc:  # reported through pull; the router restarts or fails the worker
            error = f"{type(exc).__name__}: {exc}"
        finally:
            if local is not None:
                shutil.rmtree(local, ignore_errors=True)
            self.channel.finish(error)

    def push(self, seq: int, msg: Any) -> None:
        self.channel.push(seq, msg)

    def pull(self, timeout: float) -> tuple[list[Any], bool, str | None]:
        return self.channel.pull(timeout)

    def join(self, timeout: float) -> bool:
        if self.thread is not None:
            self.thread.join(timeout)
        return self.thread is None or not self.thread.is_alive()


class RayPlacement:
    """The cluster connection, the placement group and the shipped model, shared by all `RayWorker`s."""

    def __init__(self, address: str, workers: int, cpus_per_worker: float, model: Any, ship_model: bool,
                 timeout_s: float) -> None:
        import ray
        from ray.util.placement_group import placement_group

        self.ray = ray
        self.owns_connection = not ray.is_initialized()
        if self.owns_connection:
            ray.init(address=address, log_to_driver=False, namespace="recipe", configure_logging=False)
        self.cpus = cpus_per_worker
        self.group = placement_group([{"CPU": cpus_per_worker}] * workers, strategy="SPREAD")
        if not self.group.wait(timeout_seconds=timeout_s):
            ray.util.remove_placement_group(self.group)
            raise RuntimeError(f"the Ray cluster at {address} cannot place {workers} workers of "
                               f"{cpus_per_worker} CPUs each (cluster resources: {ray.cluster_resources()})")
        self.model_ref = None
        self.single_file = False
        if ship_model and isinstance(model, str | os.PathLike) and Path(model).exists():
            self.single_file = Path(model).is_file()
            self.model_ref = ray.put(pack_model(str(model)))
        self.actor_class = ray.remote(WorkerActor)

    def spawn(self, spec: WorkerSpec, on_message: Callable[[Any, Any], None],
              on_exit: Callable[[Any], None]) -> RayWorker:
        return RayWorker(self, spec, on_message, on_exit)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ray.util.remove_placement_group(self.group)
        self.model_ref = None
        if self.owns_connection:
            self.ray.shutdown()


class RayWorker:
    """The router's view of one worker actor (the face of `pool.WorkerProcess`)."""

    def __init__(self, placement: RayPlacement, spec: WorkerSpec, on_message: Callable[[Any, Any], None],
                 on_exit: Callable[[Any], None]) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = placement.ray
        self._ray = ray
        config = spec.engine_config
        if "num_threads" not in config:  # as many torch threads as the bundle's CPUs
            config = {**config, "num_threads": max(1, int(placement.cpus))}
        self.spec = dataclasses.replace(spec, cores=None, engine_config=config)  # a node's cores are its own
        self.role = spec.role
        self.ready: m.Ready | None = None
        self.ready_event = threading.Event()
        self.alive = True
        self.stats: m.Stats | None = None
        self.exit_reason: str | None = None
        self._on_message, self._on_exit = on_message, on_exit
        self._seq = 0
        self._send_lock = threading.Lock()
        strategy = PlacementGroupSchedulingStrategy(placement.group, placement_group_bundle_index=spec.worker_id
                                                    % len(placement.group.bundle_specs))
        actor_class: Any = placement.actor_class  # calls go through `.remote`, which typing cannot see
        self.actor: Any = actor_class.options(num_cpus=placement.cpus, scheduling_strategy=strategy,
                                              max_concurrency=4, max_restarts=0).remote()
        self.actor_pid: int | None = None
        self.node_id: str | None = None
        self.node_ip: str | None = None
        self._where = self.actor.where.remote()  # read by the reader thread: actors start side by side
        self.actor.start.remote(self.spec, placement.model_ref, placement.single_file)
        self._reader = threading.Thread(target=self._read, name=f"recipe-ray-read-{spec.worker_id}", daemon=True)
        self._reader.start()

    @property
    def worker_id(self) -> int:
        return self.spec.worker_id

    @property
    def pid(self) -> int | None:
        return self.actor_pid

    @property
    def exitcode(self) -> str | None:
        return self.exit_reason

    def send(self, msg: Any) -> bool:
        if not self.alive:
            return False
        with self._send_lock:
            self.actor.push.remote(self._seq, msg)
            self._seq += 1
        return True

    def _read(self) -> None:
        ray = self._ray
        try:
            self.actor_pid, self.node_id, self.node_ip = ray.get(self._where)
            while True:
                msgs, done, error = ray.get(self.actor.pull.remote(PULL_WAIT_S))
                for msg in msgs:
                    if isinstance(msg, m.Ready):
                        self.ready = msg
                        self.ready_event.set()
                    elif isinstance(msg, m.Stats):
                        self.stats = msg
                    self._on_message(self, msg)
                if done:
                    self.exit_reason = error or "stopped"
                    break
        except ray.exceptions.RayError as exc:  # the actor (or its node) died
            self.exit_reason = type(exc).__name__
        finally:
            self.alive = False
            self.ready_event.set()
            self._on_exit(self)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the loop to stop, wait for it, then end the actor."""
        ray = self._ray
        if self.send(m.Stop()):
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(self.actor.join.remote(timeout), timeout=timeout + 5)
        self.alive = False
        with contextlib.suppress(Exception):
            ray.kill(self.actor)
        self._reader.join(timeout)
