"""Several models checked at once, each in a process of its own (``fsm-core check --workers``).

A loaded :class:`Model` holds compiled code, so it never crosses a process boundary: a worker
loads its model again from the file the caller loaded it from (:class:`Source`, with the same
``--specs``), checks it, and sends back a :class:`Detached` report (everything the report
prints, without the model, the properties' predicates or the search's parent pointers), which
the caller joins to its own model again (:func:`attach`)::

    reports = check_in_workers([(model, Source(path))], workers=2)

The workers are :mod:`multiprocessing` processes, one per model and at most ``workers`` at a
time, made by the ``forkserver`` (``spawn`` where there is none): a server that has imported
the checker once forks each worker, so a worker starts in milliseconds and never inherits the
caller's threads. A process per model, rather than a pool of long-lived ones, is what lets the
caller name the model whose worker died and stop every worker with
:meth:`multiprocessing.Process.terminate`: :class:`concurrent.futures.ProcessPoolExecutor`
breaks every pending future when one worker dies and has no public way to stop its workers on
Python 3.11.

Each worker talks to the caller over a pipe of its own: progress ticks and, last, its report.
The caller prints the progress lines itself, so lines from several workers never interleave
within a line and go wherever the caller's standard error goes.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Literal, final

from fsm_core._errors import FsmError, TransitionError
from fsm_core.check._check import Backend, Report, check
from fsm_core.check._config import Model
from fsm_core.check._explore import Progress, Result, Violation
from fsm_core.check._modelfile import load_model
from fsm_core.check._moves import Move
from fsm_core.check._property import Property

__all__ = ["Detached", "Source", "WorkerDied", "attach", "check_in_workers", "detach"]


@final
@dataclass(frozen=True, slots=True)
class Source:
    """Where a worker loads a model from: the arguments the caller gave :func:`load_model`."""

    path: Path
    display: str | None = None
    specs: Path | None = None


@final
@dataclass(frozen=True, slots=True)
class Detached:
    """A :class:`Report` without its model: what a worker sends back, picklable.

    Invariant: ``properties`` carry no predicate and ``result`` no parent pointers or graph;
    the report functions read neither (only names, statements, clauses and the trace).
    """

    result: Result[Any]
    names: tuple[str, ...]
    moves: list[Move]
    properties: tuple[Property, ...]
    dead_rows: tuple[str, ...]
    violation: Violation[Any] | None
    unreacted: tuple[str, ...]
    unreached: tuple[str, ...]
    backend: Literal["vector", "python"]
    fallback: str | None


def detach(report: Report) -> Detached:
    """``report`` without what only the process that checked it can hold or needs."""
    result = dataclasses.replace(report.result, graph=None, parent={})
    return Detached(
        result,
        report.names,
        report.moves,
        tuple(dataclasses.replace(p, predicate=None) for p in report.properties),
        report.dead_rows,
        report.violation,
        report.unreacted,
        report.unreached,
        report.backend,
        report.fallback,
    )


def attach(detached: Detached, model: Model) -> Report:
    """The report of ``model`` that ``detached`` was made from (less what :func:`detach` left)."""
    d = detached
    return Report(
        model,
        d.result,
        d.names,
        d.moves,
        d.properties,
        d.dead_rows,
        d.violation,
        d.unreacted,
        d.unreached,
        d.backend,
        d.fallback,
    )


class WorkerDied(FsmError):
    """A worker ended without a report (killed, out of memory): the run cannot be reported."""


class _WorkerFault(FsmError):
    """A worker refused its model (a file that changed since the caller read it)."""


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        # The server imports the checker once; each worker it forks starts with it loaded.
        context.set_forkserver_preload(["fsm_core.check._parallel", "fsm_core.check._vector"])
        return context
    return multiprocessing.get_context("spawn")


_Message = tuple[Any, ...]
"""What a worker sends: ``("progress", states, frontier, depth, elapsed)``, then one of
``("report", Detached)``, ``("refused", message)`` (an :class:`FsmError` but a bug's) or
``("failed", traceback)``."""


def _work(conn: Connection, source: Source, max_states: int | None, backend: Backend) -> None:
    """A worker's body: load the model, check it, send the report over ``conn``."""
    # Ctrl-C in a terminal reaches the whole process group; the caller alone answers it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def progress(states: int, frontier: int, depth: int, elapsed: float) -> None:
        conn.send(("progress", states, frontier, depth, elapsed))

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
    conn.close()


@dataclass(slots=True)
class _Running:
    index: int
    model: Model
    process: BaseProcess
    conn: Connection
    progress: Progress
    report: Report | None = None


def check_in_workers(
    jobs: Sequence[tuple[Model, Source]],
    workers: int,
    *,
    progress: Callable[[str], Progress] | None = None,
    on_report: Callable[[Report], None] | None = None,
    max_states: int | None = None,
    backend: Backend = "auto",
) -> list[Report]:
    """Check each job's model in a worker process, at most ``workers`` at once; the reports in
    the order of ``jobs``, the same as :func:`check` gives one model after another.

    ``progress(name)`` makes the callback for a model's ticks, called in this process.
    ``on_report`` sees each report in the order of ``jobs``, as soon as it and every report
    before it are in. A worker that ends without a report raises :class:`WorkerDied` naming
    its model; a worker's :class:`FsmError` is raised here with its message; any other
    fault in a worker is a bug, raised as :class:`RuntimeError` with the worker's traceback.
    Whatever ends the call early (those, an interrupt, an exception from a callback) stops
    every worker still running before it propagates.
    """
    context = _context()
    waiting = list(enumerate(jobs))
    waiting.reverse()
    running: dict[Connection, _Running] = {}
    reports: dict[int, Report] = {}
    shown = 0
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                index, (model, source) = waiting.pop()
                reader, writer = context.Pipe(duplex=False)
                process = context.Process(  # type: ignore[attr-defined]
                    target=_work,
                    args=(writer, source, max_states, backend),
                    name=f"fsm-core check {model.name}",
                    daemon=True,
                )
                process.start()
                writer.close()  # the worker holds the only writing end: its death is EOF here
                tick = progress(model.name) if progress is not None else _silent
                running[reader] = _Running(index, model, process, reader, tick)
            # A worker's pipe (a message is in) and its sentinel (it has ended), each with
            # True iff it is the sentinel.
            ends: dict[object, tuple[_Running, bool]] = {}
            for job in running.values():
                ends[job.conn] = (job, False)
                ends[job.process.sentinel] = (job, True)
            pipes = [job.conn for job in running.values()]
            for ready in wait([*pipes, *(job.process.sentinel for job in running.values())]):
                job, ended = ends[ready]
                if job.conn not in running:
                    continue  # its pipe and its sentinel were both ready; one settled it
                if _receive(job, ended=ended):
                    del running[job.conn]
                    job.conn.close()
                    job.process.join()
                    assert job.report is not None
                    reports[job.index] = job.report
            while shown in reports:
                if on_report is not None:
                    on_report(reports[shown])
                shown += 1
    finally:
        for job in running.values():
            job.process.terminate()
        for job in running.values():
            job.process.join()
            job.conn.close()
    return [reports[i] for i in range(len(jobs))]


def _silent(states: int, frontier: int, depth: int, elapsed: float) -> None:
    pass


def _receive(job: _Running, *, ended: bool) -> bool:
    """Read the next message of ``job``'s worker (every one it left, once it has ``ended``);
    True iff its report is in. Raises when the worker failed, or ended without a report."""
    while not ended or job.conn.poll(0):
        try:
            message: _Message = job.conn.recv()
        except EOFError:  # the worker is gone, and its report never came
            break
        kind = message[0]
        if kind == "progress":
            job.progress(*message[1:])
        elif kind == "report":
            job.report = attach(message[1], job.model)
            return True
        elif kind == "refused":
            raise _WorkerFault(message[1])
        else:
            raise RuntimeError(f"the worker checking {job.model.name} failed:\n{message[1]}")
        if not ended:
            return False
    job.process.join()
    code = job.process.exitcode
    how = (
        f"killed by {signal.Signals(-code).name}"
        if code is not None and code < 0
        else f"exit status {code}"
    )
    raise WorkerDied(
        f"the worker checking {job.model.name} ({job.model.file}) died ({how}) before it "
        "reported; nothing is reported: --workers 1 checks every model in this process"
    )
