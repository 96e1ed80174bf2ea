"""Small helpers more than one test module needs."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest
from jsonschema import Draft202012Validator, validators
from jsonschema.protocols import Validator

from fsm_core import Agent
from fsm_core._paths import models_dir, specs_dir
from fsm_core.check import Model, load_models
from fsm_core.runtime._core import AgentCore

if TYPE_CHECKING:
    from fsm_core.check._composed._compiled import CompiledEngine

__all__ = [
    "FSM_CORE",
    "NOTIFICATIONS",
    "alive",
    "copy_specs",
    "core_of",
    "edit",
    "exactly",
    "head",
    "interrupt",
    "once_per_run",
    "reached",
    "schema_validator",
    "shipped_models",
    "write_model",
]

NOTIFICATIONS = (
    "agent/status",
    "agent/cancel-requested",
    "inbox/inserted",
    "inbox/discarded",
    "inbox/claimed",
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/message",
    "turn/error",
    "agent/disposing",
    "agent/disposed",
)
"""Every notification an agent publishes on the runtime's bus (``EventBus.emit``)."""


def core_of(agent: Agent) -> AgentCore:
    """The private core behind ``agent``: its hosted machine, holder, handlers and driver.

    Tests reach the plumbing through here only; the public :class:`Agent` does not expose it.
    """
    return cast(AgentCore, agent._core)


def exactly(message: str) -> str:
    """A ``match=`` pattern for exactly this whole message."""
    return f"^{re.escape(message)}$"


def copy_specs(parent: Path) -> Path:
    """A private copy of the shipped tables at ``parent/specs`` (``load_spec`` caches by path),
    without the conformance vectors (27 MB, which no check reads: copying them took a tenth of
    the suite's time)."""
    specs = parent / "specs"
    shutil.copytree(specs_dir(), specs, ignore=shutil.ignore_patterns("vectors"))
    return specs


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old``, which must occur exactly once in the file, by ``new``."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} must occur exactly once in {path.name}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def write_model(parent: Path, name: str, body: str) -> Path:
    """``parent/models/NAME.toml`` holding ``body``, beside a copy of the shipped ``specs/``
    (made on first use), so ``table = "../specs/..."`` finds the copy."""
    if not (parent / "specs").exists():
        copy_specs(parent)
    path = parent / "models" / f"{name}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return path


FSM_CORE = (sys.executable, "-m", "fsm_core")
"""The command line as a process of its own, for what only a process shows: signals, pipes,
exit statuses."""


def interrupt(argv: Sequence[str], under_way: str) -> tuple[int, str, str]:
    """Run ``fsm-core ARGV`` and send it SIGINT once it prints a stderr line starting with
    ``under_way``; its (exit status, stdout, stderr)."""
    with subprocess.Popen(
        [*FSM_CORE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as p:
        assert p.stderr is not None
        seen: list[str] = []
        for line in p.stderr:
            seen.append(line)
            if line.startswith(under_way):
                break
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    return p.returncode, out, "".join(seen) + err


def head(argv: Sequence[str]) -> tuple[int, bytes, bytes]:
    """Run ``fsm-core ARGV | head -1``: read one line of its output, then close the pipe; its
    (exit status, that line, stderr)."""
    with subprocess.Popen([*FSM_CORE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        assert p.stdout is not None
        line = p.stdout.readline()
        p.stdout.close()
        _, err = p.communicate(timeout=120)
    return p.returncode, line, err


def alive(pid: int) -> bool:
    """True iff a process ``pid`` exists, a zombie included (``kill(pid, 0)`` succeeds): a
    test that finds it gone knows the process was reaped, not merely killed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def exits(pid: int) -> bool:
    """Wait until ``pid`` exits (a process not ours to reap: its pidfd turns readable); True
    iff it did within a minute, which a process that was told to stop takes far less than."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], 60)[0])
    finally:
        os.close(fd)


@functools.cache
def shipped_models() -> tuple[Model, ...]:
    """``load_models(models_dir())``, loaded once per process: a dozen test modules list the
    shipped models as they are collected (half a second each time). Models are frozen."""
    return tuple(load_models(models_dir()))


def reachable(model: Model) -> tuple[CompiledEngine, list[tuple[Any, ...]]]:
    """The compiled engine of ``model`` and every state it reaches, unpacked."""
    from fsm_core.check._composed._compiled import CompiledEngine
    from fsm_core.check._explore import System, explore
    from fsm_core.check._system import compose

    c = compose(model)
    assert isinstance(c, CompiledEngine)
    system = System(
        model.name, c.initial(), c.steps, c.moves, c.first_violated, c.quiescent, "deadlock",
        c.unpack, c.grouped,
    )  # fmt: skip
    return c, [c.unpack(s) for s in explore(system).parent]


@functools.cache
def reached(name: str) -> tuple[tuple[Any, ...], ...]:
    """Every state the compiled engine of the shipped model ``name`` reaches, unpacked (plain
    values, the same from any engine of the model), once per process: the scope audit and the
    sibling canonicaliser's order test both read every state of ``activation_tree`` (three
    seconds of search each). The engine is not kept: its memo is a check's largest structure."""
    return tuple(reachable(next(m for m in shipped_models() if m.name == name))[1])


T = TypeVar("T")


def sweep(values: Iterable[T], ids: Callable[[T], str], fast: Collection[str]) -> list[Any]:
    """``values`` as the parameters of a differential sweep: the representatives whose id is in
    ``fast`` run at every change, every other is marked ``slow`` and runs in CI's slow stage
    (tests/README.md), so a change is tested at once and the whole sweep still guards CI."""
    values = list(values)
    named = {ids(v) for v in values}
    assert set(fast) <= named, f"no parameter {sorted(set(fast) - named)}"
    return [
        pytest.param(v, id=ids(v), marks=() if ids(v) in fast else pytest.mark.slow) for v in values
    ]


def once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[], str]) -> str:
    """What ``make()`` returns, computed once per pytest run however many xdist workers ask:
    the first to ask computes it under a lock and leaves it in a file ``name`` in the run's
    temporary directory, which the others read. For a costly run many tests read (the whole
    default ``fsm-core check``), not for anything a test changes."""
    base = factory.getbasetemp()
    if base.name == f"popen-{os.environ.get('PYTEST_XDIST_WORKER')}":
        base = base.parent  # the run's own directory: xdist gives each worker one inside it
    kept = base / f"once-{name}.txt"
    with open(base / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.exists():
            text = make()
            partial = kept.with_suffix(".partial")
            partial.write_text(text, encoding="utf-8")
            partial.rename(kept)
        return kept.read_text(encoding="utf-8")


def npm_install(request: pytest.FixtureRequest, name: str, package: str, version: str) -> Path:
    """Where npm installed ``package@version``: once per checkout, under pytest's cache entry
    ``name`` (or the temporary directory, without the cache plugin), xdist's workers sharing
    the one install; the test fails with npm's message when it cannot install it."""
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        prefix = Path(cache.mkdir(name))
    else:  # -p no:cacheprovider: one install per user, still not one per run
        prefix = Path(tempfile.gettempdir()) / f"fsm-core-{name}-{os.getuid()}"
        prefix.mkdir(exist_ok=True)
    installed = prefix / "node_modules" / package / "package.json"
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed.exists() or json.loads(installed.read_text())["version"] != version:
            done = subprocess.run(
                ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                 f"{package}@{version}"],
                capture_output=True, text=True, timeout=180, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                pytest.fail(f"npm could not install {package}@{version}:\n{done.stderr[-2000:]}")
    return prefix


_CONTEXTUAL = {"$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "unevaluatedProperties",
               "unevaluatedItems"}  # fmt: skip
"""Keywords that make a value's validity against a ``$ref`` depend on more than the value."""


def _keywords(schema: object) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            yield from _keywords(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _keywords(value)


def schema_validator(schema: dict[str, Any]) -> Validator:
    """A draft 2020-12 validator of ``schema`` that reports exactly the errors
    ``Draft202012Validator(schema)`` reports, faster on documents that repeat themselves.

    jsonschema interprets the schema anew for every value (the export of the tables takes most
    of a second): this one remembers each value found valid against each ``$ref``, by the
    value's ``repr``, and does not descend into it again, in this document or a later one (the
    same export mutated in one place, vector lines of one shape). That is sound where a
    ``$ref`` names one subschema and whether a value matches it depends on the value alone: no
    nested ``$id`` or anchors, no ``$dynamicRef``, no ``unevaluated*`` (refused here). Only
    valid outcomes are remembered, so every error is still found and placed as before."""
    contextual = _CONTEXTUAL & set(_keywords({k: v for k, v in schema.items() if k != "$id"}))
    assert not contextual, f"a $ref's outcome depends on its context here: {sorted(contextual)}"
    Draft202012Validator.check_schema(schema)
    valid: set[tuple[str, str]] = set()
    plain_ref = Draft202012Validator.VALIDATORS["$ref"]

    def remembered_ref(
        validator: Validator, ref: str, instance: object, subschema: dict[str, Any]
    ) -> Iterator[Any]:
        key = (ref, repr(instance))
        if key in valid:
            return
        errors = list(plain_ref(validator, ref, instance, subschema))
        if errors:
            yield from errors
        else:
            valid.add(key)

    remembering = validators.extend(Draft202012Validator, {"$ref": remembered_ref})  # type: ignore[no-untyped-call]
    return cast(Validator, remembering(schema))
