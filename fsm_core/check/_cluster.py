"""The partitioned search (:mod:`fsm_core.check._partition`) on a Dask distributed cluster:
``fsm-core check --cluster tcp://HOST:8786``.

Each worker of the cluster holds one shard, made by a task pinned to it that loads the model
from its file (the same path, so every worker needs fsm-core and the same models and tables)
and kept in the worker's process between tasks (:data:`_HELD`, by run and shard). A level is
two rounds of tasks pinned to their shards' workers: each shard's expansion, whose payload
for each other shard is picked by a task of its own, and each shard's merge, which takes
those payloads as its arguments, so Dask moves them from worker to worker and schedules every
task; this module only says which shard does what in which round. The caller's process holds
no state but the counts and learns only the summaries.

A worker that leaves the cluster mid-search (killed, its machine gone) loses its shard: the
search stops with :class:`~fsm_core.check._parallel.WorkerDied` naming the worker, rather
than waiting for a task pinned to a worker that is no more.

Why Dask rather than Ray: dask and distributed are pure Python wheels (Ray's is some 70 MB
with a native core), the scheduler and the workers are two commands (``dask scheduler``,
``dask worker ADDRESS``), and ``LocalCluster`` runs the same code in processes for the tests.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Sequence
from typing import Any, Final, final

from distributed import Client, Future, wait
from distributed.comm.addressing import get_address_host_port, parse_address

from fsm_core._errors import FsmError, UsageError
from fsm_core.check._check import Report
from fsm_core.check._config import Model
from fsm_core.check._explore import Progress
from fsm_core.check._modelfile import load_model
from fsm_core.check._parallel import Source, WorkerDied
from fsm_core.check._partition import (
    Engine,
    Expanded,
    Held,
    Keys,
    engine_for,
    make_shard,
    report_of,
    search,
    width,
)
from fsm_core.check._system import build

__all__ = ["Cluster", "ClusterError", "check_on_cluster", "connect"]

CONNECT: Final = 10
"""Seconds to wait for the scheduler's answer."""

POLL: Final = 2.0
"""Seconds between looks at whether every shard's worker is still in the cluster."""

_HELD: dict[tuple[str, int], Held] = {}
"""In a worker: each shard it holds, by run and shard."""


class ClusterError(FsmError):
    """The cluster cannot be reached, or was lost mid-search: nothing is reported."""


def connect(address: str) -> Client:
    """A client of the scheduler at ``address`` (a context manager that closes it); raises
    :class:`ClusterError` when there is none there within :data:`CONNECT` seconds, at once
    when a TCP address's host does not resolve or refuses the connection (Dask would retry
    it until then)."""
    try:
        _refused(address)
        return Client(address, timeout=CONNECT)  # type: ignore[no-untyped-call]
    except (OSError, ValueError) as e:  # no scheduler, or an address Dask cannot parse
        raise ClusterError(f"--cluster {address}: cannot reach a Dask scheduler: {e}") from None


def _refused(address: str) -> None:
    """Raise ``OSError`` iff ``address`` is a TCP (or TLS) address whose host name does not
    resolve or refuses a connection to its port: nobody listens there (Dask would retry either
    until its timeout). Anything else (a timeout, another scheme) is left to Dask's own connect
    and its message."""
    scheme, _ = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return
    host, port = get_address_host_port(address)
    try:
        socket.create_connection((host, port), timeout=CONNECT).close()
    except socket.gaierror as e:
        raise OSError(f"cannot resolve the host name {host!r} ({e.strerror})") from None
    except ConnectionRefusedError:
        refused = f"nothing listens at {host}:{port} (connection refused)"
        raise ConnectionRefusedError(refused) from None
    except OSError:
        return


# --- tasks, run in a worker -------------------------------------------------------------------


def _begin(run: str, me: int, owners: int, source: Source, engine: Engine) -> Keys:
    model = load_model(source.path, source.display, specs=source.specs)
    held = _HELD[run, me] = Held(make_shard(model, engine, me, owners), me)
    return held.shard.begin()


def _expand(run: str, me: int, *keys: Keys) -> tuple[Expanded, list[Any]]:
    return _HELD[run, me].expand([None if j == me else k for j, k in enumerate(keys)])


def _summary(expanded: tuple[Expanded, list[Any]]) -> Expanded:
    return expanded[0]


def _payload(expanded: tuple[Expanded, list[Any]], to: int) -> Any:
    return expanded[1][to]


def _merge(run: str, me: int, *payloads: Any) -> Keys:
    return _HELD[run, me].merge(payloads)


def _size(keys: Keys) -> int:
    return int(keys.size)


def _ask(run: str, me: int, what: str, *args: Any) -> Any:
    return _HELD[run, me].step(what, *args)


def _forget(run: str) -> None:
    for key in [k for k in _HELD if k[0] == run]:
        del _HELD[key]


# --- the coordinator's side -------------------------------------------------------------------


@final
class Cluster:
    """A :class:`~fsm_core.check._partition.Transport` over the workers of ``client``'s
    cluster, a shard on each. Use it as a context manager: leaving it drops the shards."""

    def __init__(self, client: Client, model: Model, source: Source, engine: Engine) -> None:
        self.client = client
        self.model = model
        self.run = uuid.uuid4().hex
        self.workers: list[str] = sorted(client.scheduler_info()["workers"])
        if not self.workers:
            raise WorkerDied(f"the Dask cluster of {client} has no workers")
        self.owners = len(self.workers)
        self.source = source
        self.engine = engine
        self._keys: list[Future[Any]] = []
        self._pieces: list[list[Future[Any]]] = []

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self._keys = []
        self._pieces = []
        self.client.run(_forget, self.run)

    def _on(self, shard: int, fn: Any, *args: Any) -> Future[Any]:
        return self.client.submit(fn, *args, workers=[self.workers[shard]], pure=False)

    def _gather(self, futures: Sequence[Future[Any]]) -> list[Any]:
        """The results of ``futures``, once in; raises :class:`WorkerDied` when a shard's
        worker has left the cluster (its tasks would wait for it for ever)."""
        while True:
            try:
                wait(futures, timeout=POLL)  # type: ignore[no-untyped-call]
                break
            except TimeoutError:  # a subclass of OSError: first
                present = self.client.scheduler_info()["workers"]
                for shard, address in enumerate(self.workers):
                    if address not in present:
                        raise WorkerDied(
                            f"the Dask worker {address} holding part {shard} of "
                            f"{self.owners} of {self.model.name} ({self.model.file}) left the "
                            "cluster; nothing is reported"
                        ) from None
            except OSError as e:  # the scheduler is gone
                raise ClusterError(f"lost the Dask cluster mid-search: {e}") from None
        return list(self.client.gather(futures))  # type: ignore[no-untyped-call]

    def begin(self) -> None:
        n = self.owners
        self._keys = [
            self._on(i, _begin, self.run, i, n, self.source, self.engine) for i in range(n)
        ]
        self._gather([self._on(i, _size, self._keys[i]) for i in range(n)])

    def expand(self) -> list[Expanded]:
        n = self.owners
        expanded = [self._on(i, _expand, self.run, i, *self._keys) for i in range(n)]
        self._pieces = [[self._on(i, _payload, expanded[i], j) for j in range(n)] for i in range(n)]
        summaries: list[Expanded] = self._gather(
            [self._on(i, _summary, e) for i, e in enumerate(expanded)]
        )
        return summaries

    def merge(self) -> list[int]:
        n, pieces = self.owners, self._pieces
        self._keys = [
            self._on(j, _merge, self.run, j, *(pieces[i][j] for i in range(n))) for j in range(n)
        ]
        self._pieces = []
        return self._gather([self._on(j, _size, self._keys[j]) for j in range(n)])

    def keys(self) -> list[Keys]:
        return self._gather(self._keys)

    def ask(self, shard: int, what: str, *args: Any) -> Any:
        return self._gather([self._on(shard, _ask, self.run, shard, what, *args)])[0]


def check_on_cluster(
    client: Client,
    model: Model,
    source: Source,
    *,
    progress: Progress | None = None,
    max_states: int | None = None,
    backend: str = "auto",
) -> Report:
    """``check(model, liveness=False)``'s report, the search partitioned across the workers of
    ``client``'s cluster, each loading ``model`` from ``source``; as
    :func:`~fsm_core.check._partition.check_partitioned`'s."""
    if model.symmetry:
        raise UsageError(
            f"{model.name}: a search over sibling orbits ([tree] symmetry) is not partitioned: "
            "its traces are rebuilt and its orbits counted in one process"
        )
    built = build(model)
    engine, fallback, _ = engine_for(model, built, backend)
    with Cluster(client, model, source, engine) as transport:
        result, moves = search(
            model.name, transport, width(engine, built), max_states=max_states, progress=progress
        )
    return report_of(model, built, result, moves, engine, fallback)
