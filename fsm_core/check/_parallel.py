"""Several models checked at once, each in a process of its own (``fsm-core check --workers``).

A loaded :class:`Model` holds compiled code, so it never crosses a process boundary: a worker
loads its model again from the file the caller loaded it from (:class:`Source`, with the same
``--specs``), checks it, and sends back a :class:`Detached` report (everything the report
prints, without the model, the properties' predicates or the search's parent pointers), which
the caller joins to its own model again (:func:`attach`)::

    reports = check_in_workers([(model, Source(path))], workers=2)

The workers are ``workers`` :mod:`multiprocessing` processes, each checking one model after
another, made by the ``forkserver`` (``spawn`` where there is none): a server that has imported
the checker once forks each worker, so a worker starts in milliseconds and never inherits the
caller's threads. A worker keeps the tables it has loaded (proving a table is most of a model's
loading, a second or more), so it pays for each table once, not once per model. The workers
are managed here rather than by :class:`concurrent.futures.ProcessPoolExecutor`, which breaks
every pending future when one worker dies, without saying which model it was checking, and on
Python 3.11 has no public way to stop its workers on Ctrl-C: here the caller knows each
worker's model and stops them all with :meth:`multiprocessing.Process.terminate`.

Each worker talks to the caller over a pipe of its own: progress ticks and, last, its report.
The caller prints the progress lines itself, so lines from several workers never interleave
within a line and go wherever the caller's standard error goes.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.forkserver
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final, NoReturn, final

from fsm_core._errors import FsmError, TransitionError
from fsm_core.check._check import Backend, Report, check
from fsm_core.check._config import Model
from fsm_core.check._explore import Progress
from fsm_core.check._modelfile import load_model

__all__ = [
    "Detached",
    "Source",
    "WorkerDied",
    "attach",
    "check_in_workers",
    "detach",
    "partitions",
    "warm_up",
]


@final
@dataclass(frozen=True, slots=True)
class Source:
    """Where a worker loads a model from: the arguments the caller gave :func:`load_model`."""

    path: Path
    display: str | None = None
    specs: Path | None = None


Detached = dict[str, Any]
"""A :class:`Report`'s fields but its model, by name: what a worker sends back, picklable.

Invariant: ``properties`` carry no predicate and ``result`` no parent pointers or graph; the
report functions read neither (only names, statements, clauses and the trace)."""


def detach(report: Report) -> Detached:
    """``report`` without what only the process that checked it can hold or needs. Every
    other field of :class:`Report` goes as it is, so a field added there needs nothing here."""
    fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    del fields["model"]
    fields["result"] = dataclasses.replace(report.result, graph=None, parent={})
    fields["properties"] = tuple(dataclasses.replace(p, predicate=None) for p in report.properties)
    return fields


def attach(detached: Detached, model: Model) -> Report:
    """The report of ``model`` that ``detached`` was made from (less what :func:`detach` left)."""
    return Report(model=model, **detached)


class WorkerDied(FsmError):
    """A worker ended without a report (killed, out of memory): the run cannot be reported."""


class _WorkerFault(FsmError):
    """A worker refused its model (a file that changed since the caller read it)."""


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        # The server imports the checker once; each worker it forks starts with it loaded.
        context.set_forkserver_preload(
            ["fsm_core.check._parallel", "fsm_core.check._vector", "fsm_core.check._partition"]
        )
        return context
    return multiprocessing.get_context("spawn")


def warm_up() -> None:
    """Start the forkserver now, to import the checker while this process loads the models;
    :func:`check_in_workers` would start it otherwise. Without a forkserver, nothing."""
    if _context().get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()


_Message = tuple[Any, ...]
"""What a worker sends for a job: ``("progress", states, frontier, depth, elapsed)`` ticks,
then one of ``("report", Detached)``, ``("refused", message)`` (an :class:`FsmError` but a
bug's) or ``("failed", traceback)``."""

_Job = tuple[Source, int | None, Backend]
"""What a worker is sent: a model's source, ``max_states`` and the backend; None to stop."""


def _serve(conn: Connection) -> None:
    """A worker's body: check each model it is sent, sending back its ticks and its report,
    until it is sent None or the caller is gone. Tables stay loaded from one model to the
    next (:func:`load_model` keeps the last few), so a worker pays for each table once."""
    # Ctrl-C in a terminal reaches the whole process group; the caller alone answers it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def progress(states: int, frontier: int, depth: int, elapsed: float) -> None:
        conn.send(("progress", states, frontier, depth, elapsed))

    while True:
        try:
            job: _Job | None = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        source, max_states, backend = job
        try:
            model = load_model(source.path, source.display, specs=source.specs)
            report = check(model, progress=progress, max_states=max_states, backend=backend)
            message: _Message = ("report", detach(report))
        except TransitionError:  # a bug: its traceback is the report
            message = ("failed", traceback.format_exc())
        except FsmError as e:
            message = ("refused", str(e))
        except Exception:
            message = ("failed", traceback.format_exc())
        conn.send(message)


@dataclass(slots=True)
class _Worker:
    """A worker process, and the model it is checking (None while it waits for one)."""

    process: BaseProcess
    conn: Connection
    index: int = -1
    model: Model | None = None
    progress: Progress | None = None


def check_in_workers(
    jobs: Sequence[tuple[Model, Source]],
    workers: int,
    *,
    progress: Callable[[str], Progress] | None = None,
    on_report: Callable[[Report], None] | None = None,
    max_states: int | None = None,
    backend: Backend = "auto",
) -> list[Report]:
    """Check each job's model in one of ``workers`` processes; the reports in the order of
    ``jobs``, the same as :func:`check` gives one model after another.

    ``progress(name)`` makes the callback for a model's ticks, called in this process.
    ``on_report`` sees each report as soon as it is in, in the order the models finish
    (``fsm-core check`` prints each model's row from it). A worker that ends without a report
    raises :class:`WorkerDied` naming its model; a worker's :class:`FsmError` is raised here
    with its message; any other fault in a worker is a bug, raised as :class:`RuntimeError`
    with the worker's traceback.
    Whatever ends the call (those, an interrupt, an exception from a callback, or the last
    report) stops every worker before it returns or propagates.
    """
    context = _context()
    # Handed out costliest first (popped from the end), so the longest model does not start
    # last while the other workers idle; the returned list is still in the order of ``jobs``.
    waiting = sorted(enumerate(jobs), key=lambda job: _cost(job[1][0]))
    reports: dict[int, Report] = {}
    pool: list[_Worker] = []
    stopped = False  # True iff every worker was sent None: it ends by itself
    try:
        for _ in range(min(workers, len(jobs))):
            ours, theirs = context.Pipe()
            process = context.Process(  # type: ignore[attr-defined]
                target=_serve, args=(theirs,), name="fsm-core check worker", daemon=True
            )
            process.start()
            theirs.close()  # the worker holds the only other end: its death is EOF here
            pool.append(_Worker(process, ours))
        while waiting or any(w.model is not None for w in pool):
            for worker in pool:
                if worker.model is None and waiting:
                    index, (model, source) = waiting.pop()
                    worker.index, worker.model = index, model
                    worker.progress = progress(model.name) if progress is not None else None
                    _send(worker, (source, max_states, backend))
            busy = [w for w in pool if w.model is not None]
            # A busy worker's pipe (a message is in) and its sentinel (it has ended).
            ends: dict[object, tuple[_Worker, bool]] = {}
            for worker in busy:
                ends[worker.conn] = (worker, False)
                ends[worker.process.sentinel] = (worker, True)
            for ready in wait([*(w.conn for w in busy), *(w.process.sentinel for w in busy)]):
                worker, ended = ends[ready]
                if worker.model is None:
                    continue  # its pipe and its sentinel were both ready; the pipe settled it
                report = _receive(worker, ended=ended)
                if report is not None:
                    reports[worker.index] = report
                    worker.model = worker.progress = None
                    if on_report is not None:
                        on_report(report)
        for worker in pool:
            _send(worker, None)
        stopped = True
    finally:
        for worker in pool if not stopped else ():
            worker.process.terminate()
        for worker in pool:
            worker.process.join()
            worker.conn.close()
    return [reports[i] for i in range(len(jobs))]


PARTITION_AFTER: Final = 2_000_000
"""The transitions a model's ``[expect]`` records from which ``fsm-core check`` partitions it
(a smaller search is over before the workers have loaded the model)."""


def unpartitioned(model: Model) -> str | None:
    """Why ``model``'s search cannot be split across processes or a cluster, or None."""
    if model.tier != "bench":
        return "its liveness pass needs the whole graph in one place"
    if model.symmetry:
        return "its search over sibling orbits rebuilds traces and counts orbits in one place"
    return None


def partitions(model: Model, workers: int, models: int) -> bool:
    """Whether ``fsm-core check`` partitions ``model``'s search across ``workers`` processes:
    when it is the run's only model, there is more than one worker, it is an agent or a tree,
    nothing keeps it in one process (:func:`unpartitioned`: the liveness pass of every tier
    but bench, a search over sibling orbits), and its ``[expect]`` records
    :data:`PARTITION_AFTER` transitions or more (or none).

    A table model stays in one process: its search costs less than sending its states between
    processes. On 2 cores, two processes took 1.06 times one's wall time on bench_L and 1.52
    times on bench_XL with the vector backend, 2.5 times on bench_L with the python backend
    (``benchmarks/README.md``); ``fsm-core bench --workers-speedup`` measures it again.
    """
    big = model.expect is None or model.expect.transitions >= PARTITION_AFTER
    composed = model.kind != "table"
    return workers > 1 and models == 1 and composed and unpartitioned(model) is None and big


def _cost(model: Model) -> float:
    """What checking ``model`` is expected to cost: the transitions its ``[expect]`` records,
    and the most for a model that records none (it may be the largest)."""
    return float("inf") if model.expect is None else model.expect.transitions


def _send(worker: _Worker, job: _Job | None) -> None:
    """Send ``worker`` its next job (None: stop); a worker already dead raises
    :class:`WorkerDied` naming the model it was to check."""
    try:
        worker.conn.send(job)
    except OSError:  # BrokenPipeError, which must not pass for standard output's (141)
        if worker.model is None:
            return  # stopping one that is gone anyway
        _died(worker)


def _receive(worker: _Worker, *, ended: bool) -> Report | None:
    """Read the next message of ``worker`` (every one it left, once it has ``ended``); its
    report, once in. Raises when the worker failed, or ended without a report."""
    assert worker.model is not None
    while not ended or worker.conn.poll(0):
        try:
            message: _Message = worker.conn.recv()
        except EOFError:  # the worker is gone, and its report never came
            break
        kind = message[0]
        if kind == "progress":
            if worker.progress is not None:
                worker.progress(*message[1:])
        elif kind == "report":
            return attach(message[1], worker.model)
        elif kind == "refused":
            raise _WorkerFault(message[1])
        else:
            raise RuntimeError(f"the worker checking {worker.model.name} failed:\n{message[1]}")
        if not ended:
            return None
    _died(worker)


def _died(worker: _Worker) -> NoReturn:
    assert worker.model is not None
    worker.process.join()
    code = worker.process.exitcode
    how = (
        f"killed by {signal.Signals(-code).name}"
        if code is not None and code < 0
        else f"exit status {code}"
    )
    raise WorkerDied(
        f"the worker checking {worker.model.name} ({worker.model.file}) died ({how}) before "
        "it reported; the run is cut short: --workers 1 checks every model in this process"
    )
