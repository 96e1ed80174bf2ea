"""Spec mutants: plausible one-row bugs in the tables, each of which some property must kill.

A mutant is a few structured edits of one table's parsed rows (:mod:`fsm_core.tools._row_edits`:
set a row's ``guard`` or ``to``, insert, remove, replace or move entries of its ``do``, add a
row), a sentence saying what bug it plants, and the models it runs against. The tables and
``models/`` are copied (kept as siblings, since model files name ``../specs/...``), the edits
are made on the mutated table as :mod:`tomllib` parses it and the result is written back over
the copy as TOML, since models load their tables from files; the models are loaded from the
copy and checked. A loader's fault in the copy cites the line of the table the mutant was
planted in (``specs/<table>``), at the key it names there (:meth:`Planted.cite_table`).
:data:`MUTANTS` is the one catalogue: ``tests/test_traces.py`` replays counterexamples of some
of these same mutants. The mutant is *killed* when a check finds a
violation (its name and the length of its shortest counterexample go in the kill table), or
when the loader rejects the mutated table (``load: <message>``).

The loader proves every effect's ``requires`` contract and every step invariant for each row
from every valid state, so a bug that misorders one row's own assignments and effects is a
load kill: that is what contracts are for. The kill table is worth most for the bugs only the
checker finds (re-entrant listeners, several steps, several nodes), so a mutant the loader
rejects is kept only when no variant of the same bug gets past it (``load_killed``); a
contract the checker finds broken is named ``<effect>.requires`` (``...@<node>`` in a tree)::

    from fsm_core.tools._mutants import run_mutants

    for kill in run_mutants(["latch_set_on_disposed"]):
        print(kill.mutant, kill.killed, kill.property, kill.trace)

An edit whose row, ``guard``, ``to`` or ``do`` entry is no longer in the table raises
:class:`MutantError` naming the mutant, the table and the row: a table change that invalidates
a mutant fails loudly instead of silently testing nothing. A survivor means a property is
missing (or the mutant is equivalent); ``gap`` records the ones whose missing property is known
and reported, so ``fsm-core mutants --spec`` still lists them as survivors and exits 1 until
the property exists.

``fsm-core mutants --runtime`` is the same idea one layer down: plausible bugs in the runtime's
own Python (effect handlers, event order, awaits, signals, waiters), each run against the race
machine of ``tests/race``; beside them, seed 004's teardown mutants (bugs in the activation
registry), each run against the subagent behaviour tests. Those catalogues and the switch that
turns a mutant on live only in the repository's tests (``tests/race/runtime_mutants.py``,
``tests/race/teardown_mutants.py``); :func:`run_runtime` finds them from the package's location
and prints their kill tables.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import logging
import shutil
import signal
import statistics
import sys
import tempfile
import textwrap
import time
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.pool import Pool
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from fsm_core._errors import FsmError, SpecError, echo
from fsm_core._options import positive_int
from fsm_core._paths import models_dir, specs_dir
from fsm_core.check import Report, check, load_model
from fsm_core.check._report import WIDTH, aligned, format_trace, violation_heading
from fsm_core.table import _lines
from fsm_core.table._load import read_text, read_toml
from fsm_core.tools._row_edits import (
    AddRow,
    Block,
    DropCall,
    DropRow,
    Edit,
    Insert,
    Move,
    Remove,
    Replace,
    Set,
    SetCall,
    StaleEdit,
    Unignore,
    apply_edits,
    dump_toml,
)

AGENT = ("agent_races",)
"""The models an agent.toml mutant runs against."""
TREE = ("activation_tree", "activation_chain")
"""The models an activation.toml mutant runs against, widest first; an admission.toml mutant
too (the trees compose the registry's door), and a wiring.toml mutant the agent-less trees see."""
AGENT_TREE = ("agent_tree",)
"""The models a wiring.toml mutant runs against when only a node's real agent shows it (the
agent-less trees abstract the agent: its calls go nowhere)."""


class MutantError(FsmError):
    """A mutant's edit no longer matches the table it mutates: update the mutant."""


@dataclass(frozen=True, slots=True)
class Mutant:
    """One planted bug: make ``edits`` in ``specs/<table>``, check ``models``."""

    name: str
    table: str
    edits: tuple[Edit, ...]
    doc: str
    models: tuple[str, ...]
    load_killed: bool = False
    """True iff the loader's own validation is expected to reject the edit."""
    gap: str | None = None
    """Why this mutant survives: the missing property, reported but not yet written."""

    def apply(self, data: dict[str, Any]) -> None:
        """Make the edits on the table's parsed ``data``; raises :class:`MutantError` when one
        no longer applies."""
        try:
            apply_edits(self.edits, data)
        except StaleEdit as e:
            raise MutantError(
                f"mutant {self.name!r}: specs/{self.table}: {e}; update the mutant to the "
                "current table"
            ) from None

    def plant(self, specs: Path) -> Planted:
        """Rewrite ``specs/<table>`` (a copy of the tables) with the bug planted."""
        table = specs / self.table
        display = f"specs/{self.table}"
        original = read_text(table, display)
        data = read_toml(table, display)
        self.apply(data)
        planted = dump_toml(data)
        table.write_text(planted, encoding="utf-8")
        return Planted(display, original, planted)


@dataclass(frozen=True, slots=True)
class Planted:
    """A table as written (``original``) and as a mutant rewrote it (``planted``), to cite the
    table's own lines in the loader's faults about the rewritten copy."""

    display: str
    original: str
    planted: str

    def cite_table(self, error: SpecError) -> SpecError:
        """``error`` with each of its faults about the planted copy at the line of the same key
        in the table as written: a row or call by its id, another entry of an array of tables
        by its index. A fault in what the mutant adds (a row, say) says so, with no line."""
        at: dict[int, _lines.Path] = {}  # each line of the copy: the deepest path written there
        for path, line in _lines.key_lines(self.planted).items():
            if len(path) > len(at.get(line, ())):
                at[line] = path
        lines = _lines.key_lines(self.original)
        before, after = tomllib.loads(self.original), tomllib.loads(self.planted)
        faults: list[SpecError] = []
        for e in error.faults:
            if e.file != self.display or e.line is None or e.line not in at:
                faults.append(e)
                continue
            same = _same_place(at[e.line], after, before)
            if same is None:
                fault = f"{e.fault} (in what the mutant adds: no line of {self.display} holds it)"
                faults.append(SpecError(e.file, e.where, fault))
            else:
                faults.append(SpecError(e.file, e.where, e.fault, _lines.line_of(lines, same)))
        return SpecError.of(faults)


def _same_place(
    path: _lines.Path, planted: dict[str, Any], original: dict[str, Any]
) -> _lines.Path | None:
    """``path`` in the planted copy as a path in the original table, None for an entry of an
    array of tables the original lacks."""
    if len(path) < 2 or not isinstance(path[1], int):
        return path
    section, index = str(path[0]), path[1]
    entries = original.get(section, [])
    entry = planted[section][index]
    if isinstance(entry, dict) and "id" in entry:
        same = [
            j for j, e in enumerate(entries) if isinstance(e, dict) and e.get("id") == entry["id"]
        ]
        return (section, same[0], *path[2:]) if same else None
    return path if index < len(entries) else None


@dataclass(frozen=True, slots=True)
class Kill:
    """What checking one mutant found.

    ``property`` names what killed it (``load: ...`` for the loader), None for a survivor;
    ``trace`` is the number of steps in the counterexample (0 for a load kill or a survivor);
    ``model`` is the model whose check killed it.
    """

    mutant: str
    killed: bool
    property: str | None
    trace: int
    seconds: float
    model: str | None = None


MUTANTS: tuple[Mutant, ...] = (
    # --- agent.toml -------------------------------------------------------------------------------
    Mutant(
        "last_wins_cause",
        "agent.toml",
        (
            Replace(
                "cancel.turn",
                Block(
                    "holder == live",
                    ("holder := aborted", "reason := cause", "abort_holder(cause)"),
                ),
                "holder := aborted",
                "reason := cause",
                "abort_holder(cause)",
            ),
        ),
        "cancel.turn aborts even when a cancel-requested observer's cancel already won, so the "
        "outer cause overwrites the reason.",
        AGENT,
    ),
    Mutant(
        "latch_set_on_disposed",
        "agent.toml",
        (Insert("send.disposing", "latch := wake", before="pending := true"),),
        "A waking send after disposal began latches, as it would while cancelling.",
        AGENT,
    ),
    Mutant(
        "holder_cleared_after_turn_end",
        "agent.toml",
        (Move("retire.ended", "publish_turn_end(end)", before="holder := none"),),
        "retire.ended publishes turn/end before clearing the holder, so turn/end observers "
        "still hold cancellation authority.",
        AGENT,
        load_killed=True,
    ),
    Mutant(
        "clearing_cancel_keeps_latch",
        "agent.toml",
        (Move("cancel.discard", "latch := false", before="notify_cancel_requested(cause)"),),
        "cancel.discard drops the latch before it notifies, so it clears the inbox but leaves "
        "the latch a cancel-requested observer's wake set: a wake replays with no work.",
        AGENT,
    ),
    Mutant(
        "keep_inbox_parks_post_abort_wake",
        "agent.toml",
        (
            Remove("converge.replay", "scheduled := true"),
            Replace("converge.replay", "schedule_driver()", Block("quiescent", ("settle_idle()",))),
        ),
        "Convergence after a keep_inbox cancel parks the latched post-abort wake with the "
        "pre-abort work instead of replaying it.",
        AGENT,
    ),
    Mutant(
        "replay_without_pending_check",
        "agent.toml",
        (
            Set(
                "converge.replay",
                "guard",
                "not turn and holder == none and not closing and latch and pending",
                "not turn and holder == none and not closing and latch",
            ),
        ),
        "converge.replay replays on the latch alone, without checking that work is pending.",
        AGENT,
        load_killed=True,
    ),
    Mutant(
        "removal_keeps_latch",
        "agent.toml",
        (Remove("remove", "latch := latch and rest"),),
        "Removing the last queued message leaves the latch set, so its replay is not suppressed.",
        AGENT,
    ),
    Mutant(
        "notify_after_clear",
        "agent.toml",
        (
            Move(
                "cancel.turn",
                Block("not keep_inbox", ("pending := false", "latch := false", "clear_inbox()")),
                before="notify_cancel_requested(cause)",
            ),
        ),
        "cancel.turn clears the inbox before notifying, so work a cancel-requested observer "
        "queues escapes the clear.",
        AGENT,
    ),
    Mutant(
        "prerun_marker_carries_cause",
        "agent.toml",
        (Insert("cancel.prerun", "reason := cause", after="marker := true"),),
        "The pre-run cancel records its cause as the reason, though no holder exists.",
        AGENT,
    ),
    Mutant(
        "prerun_cancel_opens_turn",
        "agent.toml",
        (Replace("cancel.prerun", "marker := true", "marker := false"),),
        "The pre-run cancel leaves no marker, so the scheduled driver still opens a turn for "
        "the work a keep_inbox cancel kept.",
        AGENT,
    ),
    Mutant(
        "maintenance_not_latching",
        "agent.toml",
        (
            Replace(
                "send.latched", "latch := true", Block("phase == cancelling", ("latch := true",))
            ),
        ),
        "A waking send during maintenance only queues; nothing replays it when the task ends.",
        AGENT,
    ),
    Mutant(
        "disposal_replays_latched_wake",
        "agent.toml",
        (Remove("dispose.converging", "latch := false"),),
        "Disposal of a converging activity keeps its latched wake for a replay.",
        AGENT,
    ),
    Mutant(
        "replacement_reuses_aborted_holder",
        "agent.toml",
        (
            Remove(
                "claim.replacement",
                "release_holder()",
                "holder := live",
                "reason := none",
                "open_holder()",
            ),
        ),
        "claim.replacement runs the replacement under the aborted holder instead of a fresh one.",
        AGENT,
    ),
    Mutant(
        "when_idle_settles_while_driver_scheduled",
        "agent.toml",
        (Replace("converge.idle", Block("quiescent", ("settle_idle()",)), "settle_idle()"),),
        "converge.idle resolves when_idle() even when an idle listener's send scheduled a driver.",
        AGENT,
    ),
    Mutant(
        "running_before_holder",
        "agent.toml",
        (Move("start.turn", "publish_status(running)", before="holder := live"),),
        "start.turn publishes running before installing the holder, so a running listener's "
        "cancel finds nothing to abort.",
        AGENT,
        load_killed=True,
    ),
    Mutant(
        "latch_after_insertion",
        "agent.toml",
        (Move("send.latched", "latch := true", after="enqueue(next_turn)"),),
        "send.latched latches only after publishing the insertion, so a disposal an inbox "
        "listener begins finds no latch to clear and the wake stays latched.",
        AGENT,
    ),
    Mutant(
        "replay_idle_before_scheduling",
        "agent.toml",
        (Move("converge.replay", "publish_status(idle)", before="scheduled := true"),),
        "converge.replay publishes idle before it schedules the replay's driver, so an idle "
        "listener sees an idle agent with nothing scheduled still owing the latched wake.",
        AGENT,
    ),
    # --- activation.toml --------------------------------------------------------------------------
    Mutant(
        "parent_leaves_before_children",
        "activation.toml",
        (Set("children.joined", "guard", "not children", None),),
        "children.joined fires before every owned child settled, so the parent converges first.",
        TREE,
    ),
    Mutant(
        "settlement_notice_dropped",
        "activation.toml",
        (Remove("child.settled", "children := not last"),),
        "A live parent accepts a child's settlement notice but forgets that the child settled.",
        TREE,
    ),
    Mutant(
        "dispose_not_memoized",
        "activation.toml",
        (
            DropRow("dispose.memoized"),
            AddRow(
                'id = "dispose.again"\n'
                'on = "dispose"\n'
                'from = ["joining", "awaiting_idle", "flushing", "releasing", "settled"]\n'
                'guard = "not drain or by_drain"\n'
                'to = "joining"\n'
                'do = ["flushed := final_state_flushed", "close_inbox()", "cancel_agent(parent)", '
                '"dispose_children(true, by_drain)"]\n'
                'clauses = ["S004.memoized-close"]\n'
                'doc = "A later dispose() runs finishDisposal again."\n'
            ),
        ),
        "dispose() is not memoized: every later caller starts finishDisposal again.",
        TREE,
    ),
    Mutant(
        "notify_after_ownership_release",
        "activation.toml",
        (
            Move(
                "ledger.converge",
                "owned := false",
                "release_ownership()",
                before="announced := true",
            ),
        ),
        "ledger.converge releases ownership (step 4) before notifying the parent (step 3).",
        TREE,
        load_killed=True,
    ),
    Mutant(
        "notify_before_leaving_registry",
        "activation.toml",
        (
            Move(
                "ledger.converge",
                "announced := true",
                "notify_parent(failure)",
                before="resident := false",
            ),
        ),
        "ledger.converge notifies the parent before leaving the registry and releasing the slot.",
        TREE,
        load_killed=True,
    ),
    Mutant(
        "handle_disposed_before_final_flush",
        "activation.toml",
        (Set("idle.flush", "to", "flushing", "releasing"),),
        "idle.flush starts the final flush and moves on to releasing without awaiting it, so "
        "the handle's disposal can settle before the flush did.",
        TREE,
    ),
    # --- admission.toml (the registry's door, composed with the trees) --------------------------
    Mutant(
        "drain_closes_door_only",
        "wiring.toml",
        (DropCall("door.drains_roots"),),
        "drain() closes admission registry-wide but its drain_roots() reaches no root (the "
        "connection lost): the activations stay active behind a drained door, and a delivery "
        "reaches one with drained=true.",
        TREE,
    ),
    Mutant(
        "root_notice_refused",
        "admission.toml",
        (Set("root_settled", "guard", "parent != stale", "parent == host_disposing"),),
        "The door takes a root's settlement notice only for a disposing host parent, so a live "
        "host parent never hears that its root settled.",
        TREE,
    ),
    Mutant(
        "door_admits_after_drain",
        "admission.toml",
        (
            AddRow(
                'id = "admit.after_drain"\n'
                'on = "admit"\n'
                'from = ["drained"]\n'
                'do = ["admit_below()"]\n'
                'clauses = ["S004.drain-admission"]\n'
                'doc = "A drained door still hands admissions on to the parent activation."\n'
            ),
            Unignore("admit", "rejected"),
        ),
        "The drained door hands an admission below an activation on to the activation's own "
        "row instead of refusing it with DRAINING.",
        TREE,
        load_killed=True,
    ),
    # --- wiring.toml (the connections between instances, composed by the trees) -----------------
    # The only two calls one effect makes (notify_parent's, to the parent and to the door) are
    # `only = "child"` and `only = "root"`: exactly one fires, so their order cannot matter
    # (MoveCall there is an equivalent mutant). The reorderings below move a call in time or
    # change the fact that orders a parent's convergence after its children.
    Mutant(
        "close_leaves_agent_awake",
        "wiring.toml",
        (DropCall("close.shuts_agent"),),
        "The memoized close no longer shuts its agent's waking, so a followup sent straight to "
        "the agent of an activation being disposed wakes it into a model turn.",
        AGENT_TREE,
    ),
    Mutant(
        "notice_never_reaches_parent",
        "wiring.toml",
        (DropCall("settle.notifies_parent"),),
        "A settled child's notice reaches no parent, so the parent owns an unsettled child "
        "forever and never converges.",
        TREE,
    ),
    Mutant(
        "teardown_leaves_children",
        "wiring.toml",
        (DropCall("teardown.disposes_children"),),
        "finishDisposal disposes no owned child, so a parent tears down while its children "
        "stay active.",
        TREE,
    ),
    Mutant(
        "close_never_cancels_agent",
        "wiring.toml",
        (DropCall("close.cancels_agent"),),
        "finishDisposal never cancels its own agent, so no pre-run marker stops the driver "
        "already scheduled and a model turn opens inside the teardown.",
        AGENT_TREE,
    ),
    Mutant(
        "release_keeps_agent",
        "wiring.toml",
        (DropCall("release.disposes_agent"),),
        "handle.dispose() never disposes the agent, so the teardown awaits a disposal that "
        "never comes.",
        AGENT_TREE,
    ),
    Mutant(
        "every_notice_last",
        "wiring.toml",
        (SetCall("settle.notifies_parent", "args.last", "last", "true"),),
        "Every child's settlement notice tells the parent it was the last, so the parent "
        "converges and leaves the registry before a sibling settled.",
        ("activation_tree",),  # width 2: a lone child is always the last
    ),
    Mutant(
        "shut_at_release",
        "wiring.toml",
        (
            SetCall(
                "close.shuts_agent", "effect", "activation.close_inbox", "activation.dispose_handle"
            ),
        ),
        "The agent's waking is shut only when its handle is released, not at the close, so a "
        "followup sent in between wakes it into a model turn inside the teardown.",
        AGENT_TREE,
    ),
    Mutant(
        "teardown_disposes_itself",
        "wiring.toml",
        (SetCall("teardown.disposes_children", "target", "children", "self"),),
        "The teardown's dispose is aimed at the activation itself (a no-op: its close is "
        "memoized) instead of its children, which stay active.",
        TREE,
    ),
    Mutant(
        "notice_to_itself",
        "wiring.toml",
        (
            SetCall("settle.notifies_parent", "target", "parent", "self"),
            SetCall("settle.notifies_parent", "args.last", "last", "true"),
        ),
        "A settled child sends its settlement notice to itself (which knows no `last`, so "
        "the notice says true), and the settled activation refuses it.",
        TREE,
    ),
    Mutant(
        "shut_aimed_at_new_agent",
        "wiring.toml",
        (SetCall("close.shuts_agent", "target", "agent", "new_agent"),),
        "The close shuts the agent of a newly admitted child (none: the close admits nobody) "
        "instead of its own, which a followup still wakes into a model turn.",
        AGENT_TREE,
    ),
    Mutant(
        "door_swallows_admit_refusal",
        "wiring.toml",
        (SetCall("door.admits_below", "refused", "caller", "never"),),
        "The door no longer hands a parent's refusal of an admission back to the caller: an "
        "admission below a closing parent is promised to succeed and is refused anyway.",
        TREE,
    ),
    Mutant(
        "teardown_clears_inbox",
        "wiring.toml",
        (SetCall("close.cancels_agent", "args.keep_inbox", "true", "false"),),
        "finishDisposal cancels its agent clearing the inbox, so a child's pending prompt (and "
        "the settlement notices a parent holds) never reach the final capture.",
        AGENT_TREE,
    ),
)

"""The catalogue, in the order the kill table lists it."""

BY_NAME = {m.name: m for m in MUTANTS}


# --- running -------------------------------------------------------------------------------------


_NOT_TABLES = shutil.ignore_patterns("vectors")
"""What a copy of the tables leaves out: ``specs/vectors``, the port kit's vector files."""


def _copy_tables(root: Path, specs: Path | None) -> None:
    """``root/specs`` and ``root/models``: the tables (``specs``, default the shipped ones)
    and the shipped models, as siblings. Not the conformance vectors (27 MB a mutant, and no
    check reads them)."""
    shutil.copytree(specs or specs_dir(), root / "specs", ignore=_NOT_TABLES)
    shutil.copytree(models_dir(), root / "models")


def _first_failure(root: Path, models: Sequence[str]) -> tuple[str, Report | SpecError] | None:
    """Check ``models`` from the copy under ``root`` until one fails: that model's name and
    its report (with a violation) or the loader's error; None when every one holds."""
    for model_name in models:
        try:
            model = load_model(root / "models" / f"{model_name}.toml")
        except SpecError as e:
            return model_name, e
        report = check(model)
        if report.violation is not None:
            return model_name, report
    return None


def _check_models(
    root: Path, name: str, models: Sequence[str], planted: Planted | None = None
) -> Kill:
    """Check ``models`` from the copy under ``root``; the first violation kills."""
    start = time.perf_counter()
    failure = _first_failure(root, models)
    seconds = time.perf_counter() - start
    if failure is None:
        return Kill(name, False, None, 0, seconds)
    model_name, found = failure
    if isinstance(found, SpecError):
        cited = found if planted is None else planted.cite_table(found)
        return Kill(name, True, f"load: {cited}", 0, seconds, model_name)
    assert found.violation is not None
    steps = len(found.violation.trace) - 1  # the first entry is the initial state
    return Kill(name, True, found.violation.name, steps, seconds, model_name)


def run_mutant(mutant: Mutant, specs: Path | None = None) -> Kill:
    """Apply ``mutant`` to a fresh copy of the tables in ``specs`` (default: the shipped ones)
    and check its models."""
    with tempfile.TemporaryDirectory(prefix="fsm-core-mutant-") as tmp:
        root = Path(tmp)
        _copy_tables(root, specs)
        planted = mutant.plant(root / "specs")
        return _check_models(root, mutant.name, mutant.models, planted)


def run_unmutated(models: Iterable[str] | None = None, specs: Path | None = None) -> Kill:
    """Check ``models`` (every model the catalogue uses, for None) on unmodified tables
    (``specs``, default the shipped ones).

    They must all hold, or a kill proves nothing: ``killed`` True here is a fault of the
    tables (or the models) themselves, named by ``property`` and ``model``.
    """
    chosen = tuple(models) if models is not None else _models_of(MUTANTS)
    with tempfile.TemporaryDirectory(prefix="fsm-core-unmutated-") as tmp:
        root = Path(tmp)
        _copy_tables(root, specs)
        return _check_models(root, UNMUTATED, chosen)


def _models_of(mutants: Iterable[Mutant]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for m in mutants for n in m.models))


UNMUTATED = "(unmutated)"
"""The ``mutant`` name of :func:`run_unmutated`'s result."""


def select(names: Iterable[str] | None = None) -> list[Mutant]:
    """The named mutants in catalogue order (every one for None); an unknown name raises."""
    if names is None:
        return list(MUTANTS)
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if name not in BY_NAME:
            raise _unknown(name, [m.name for m in MUTANTS])
    return [m for m in MUTANTS if m.name in wanted]


def _unknown(name: str, known: Sequence[str], what: str = "mutant") -> MutantError:
    """The error for an unknown mutant ``name``: the closest names, then every one."""
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return MutantError(f"unknown {what} {echo(name)}{hint} (mutants: {', '.join(known)})")


def run_mutants(
    names: Iterable[str] | None = None, *, jobs: int | None = None, specs: Path | None = None
) -> list[Kill]:
    """Run the named mutants (every one for None), ``jobs`` processes at a time (default 2),
    on copies of the tables in ``specs`` (default: the shipped ones).

    The kills come back in catalogue order.
    """
    return _run_all(select(names), jobs, specs, unmutated=False)[1]


def _run_all(
    chosen: Sequence[Mutant], jobs: int | None, specs: Path | None, *, unmutated: bool
) -> tuple[Kill | None, list[Kill]]:
    for m in chosen:  # a stale edit fails here, before any process starts
        m.apply(read_toml((specs or specs_dir()) / m.table, f"specs/{m.table}"))
    workers = max(1, min(jobs or _DEFAULT_JOBS, len(chosen) + unmutated))
    mutate = functools.partial(run_mutant, specs=specs)
    if workers == 1:
        sanity = run_unmutated(_models_of(chosen), specs) if unmutated else None
        return sanity, [mutate(m) for m in chosen]
    with Pool(workers, _ignore_sigint) as pool:
        pending = (
            pool.apply_async(run_unmutated, (_models_of(chosen), specs)) if unmutated else None
        )
        kills = pool.map(mutate, chosen, chunksize=1)
        return (pending.get() if pending is not None else None), kills


_DEFAULT_JOBS = 2
"""Two processes: CI machines have two cores, and the agent model dominates a run."""


def _ignore_sigint() -> None:
    """Set up a worker process: SIGINT is the parent's.

    Ctrl-C reaches the whole process group; the parent handles it, and leaving a
    ``multiprocessing`` pool's ``with`` terminates the workers, so an interrupt does not wait
    for the mutants already handed to them (seconds each), as ``concurrent.futures`` would.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --- command line --------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the arguments of ``fsm-core mutants [--spec | --runtime [--no-shrink]]
    [--jobs N] [NAME ...]``."""
    parser.add_argument("names", nargs="*", metavar="NAME", help="mutants to run (default: all)")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--spec",
        action="store_true",
        help="mutate the tables in specs/ and model-check them (the default)",
    )
    kind.add_argument(
        "--runtime",
        action="store_true",
        help="mutate the runtime's own Python and run the race machine of tests/race against "
        "each mutant, and the subagent tests against each teardown mutant (needs a checkout of "
        "the repository)",
    )
    parser.add_argument(
        "--jobs", type=positive_int, default=None, metavar="N", help="processes to use (default: 2)"
    )
    parser.add_argument(
        "--show",
        default=None,
        metavar="NAME",
        help="with --spec: print mutant NAME's bug and its shortest counterexample, as check "
        "prints a violation (exit 0 when it is killed, 1 when it survives)",
    )
    parser.add_argument(
        "--no-shrink",
        dest="shrink",
        action="store_false",
        help="with --runtime: stop at each first failure, without shrinking it (no steps)",
    )


def run(args: argparse.Namespace) -> int:
    """Print the kill table for ``fsm-core mutants``; return the exit status.

    The unmutated tables are checked first, alongside the mutants: if they already fail, a
    kill proves nothing and no table is printed. Exit 0 when every mutant is killed, 1 on a
    survivor or failing unmutated tables, 2 on an unknown name, a stale edit or a flag that
    does not apply. ``--runtime`` runs :func:`run_runtime` instead, with the same statuses.
    """
    try:
        return _run(args)
    except MutantError as e:
        print(f"fsm-core: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    # --specs is the top-level parser's; a caller that built only this parser has none.
    specs: Path | None = getattr(args, "specs", None)
    show: str | None = getattr(args, "show", None)
    if show is not None:
        if args.runtime:
            raise MutantError("--show applies to --spec mutants only")
        if args.names or args.jobs is not None:
            flag = "NAME arguments" if args.names else "--jobs"
            raise MutantError(f"--show checks its one mutant in this process; drop {flag}")
    if args.runtime:
        if specs is not None:
            raise MutantError(
                "--specs applies to --spec mutants only: runtime mutants race the runtime on "
                "the shipped tables"
            )
        return run_runtime(args)
    if not args.shrink:
        raise MutantError(
            "--no-shrink applies only to --runtime: a spec mutant's trace is a shortest one"
        )
    if show is not None:
        return show_mutant(show, specs)
    start = time.perf_counter()
    chosen = select(args.names or None)
    sanity, kills = _run_all(chosen, args.jobs, specs, unmutated=True)
    assert sanity is not None
    if sanity.killed:
        print(
            f"fsm-core: the unmutated tables already fail {sanity.property} on {sanity.model} "
            f"({sanity.trace} steps); a kill table would prove nothing",
            file=sys.stderr,
        )
        return 1
    print(format_table(chosen, kills), end="")
    survived = sum(not k.killed for k in kills)
    print(
        f"Done. mutants={len(kills)} killed={len(kills) - survived} survived={survived} "
        f"sec={time.perf_counter() - start:.1f}"
    )
    return 1 if survived else 0


def format_table(mutants: Sequence[Mutant], kills: Sequence[Kill]) -> str:
    """The kill table: a line per mutant (what killed it, in which model, the counterexample's
    steps), its bug below it, indented; then each load kill's message and survivor's gap.
    Every line fits :data:`WIDTH` columns on the catalogue's names; a description or message
    is wrapped. (:attr:`Kill.seconds` is left out: the Done line times the run.)"""
    header = ("mutant", "killed by", "model", "steps")
    rows: list[tuple[str, ...]] = [header]
    notes: list[str] = []
    for m, k in zip(mutants, kills, strict=True):
        killer = k.property or "SURVIVED"
        if killer.startswith("load: "):
            killer = "load (see below)"
            notes.append(f"{m.name}: {k.property}")
        if not k.killed:
            notes.append(f"{m.name} survived: {m.gap or 'no property caught it'}")
        steps = str(k.trace) if k.trace else "-"
        rows.append((m.name, killer, k.model or "-", steps))
    head, *lines = aligned(rows, right=(3,))
    out = [head]
    for line, m in zip(lines, mutants, strict=True):
        out += [line, *_wrapped(m.doc, "    ")]
    for note in notes:
        out += _wrapped(note, "", "  ")
    return "\n".join(out) + "\n"


def _wrapped(text: str, indent: str, later: str | None = None) -> list[str]:
    """``text`` in lines of at most :data:`~fsm_core.check._report.WIDTH` columns, the first
    indented by ``indent``, the others by ``later`` (default the same)."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent if later is None else later,
        break_long_words=False,
        break_on_hyphens=False,
    )


def show_mutant(name: str, specs: Path | None = None) -> int:
    """``fsm-core mutants --show NAME``: print the mutant's bug, then what kills it (the
    shortest counterexample as ``fsm-core check`` prints it, or the loader's refusal); 0 when
    it is killed, 1 when it survives. An unknown name raises :class:`MutantError` naming the
    closest ones."""
    mutant = BY_NAME.get(name)
    if mutant is None:
        raise _unknown(name, list(BY_NAME))
    mutant.apply(read_toml((specs or specs_dir()) / mutant.table, f"specs/{mutant.table}"))
    print("\n".join(_wrapped(f"{mutant.name} (specs/{mutant.table}): {mutant.doc}", "", "  ")))
    with tempfile.TemporaryDirectory(prefix="fsm-core-mutant-") as tmp:
        root = Path(tmp)
        _copy_tables(root, specs)
        planted = mutant.plant(root / "specs")
        failure = _first_failure(root, mutant.models)
    print()
    if failure is None:
        why = mutant.gap or "no property caught it"
        models = ", ".join(mutant.models)
        print("\n".join(_wrapped(f"{mutant.name} survives on {models}: {why}", "", "  ")))
        return 1
    model, found = failure
    if isinstance(found, SpecError):
        print(f"{model}: the loader refuses the mutated specs/{mutant.table}:")
        print("\n".join(_wrapped(str(planted.cite_table(found)), "", "  ")))
        return 0
    print(violation_heading(found))
    print(format_trace(found), end="")
    return 0


# --- runtime mutants: fsm-core mutants --runtime ------------------------------------------------
# The catalogue, the switch that turns a mutant on and the runner live in the repository's
# tests/race/runtime_mutants.py, beside the race machine they run: nothing here (or anywhere in
# the package) can switch a runtime mutant on. This command only finds them, runs them in worker
# processes and prints the kill table, so it needs a checkout, not an installed wheel.

RUNTIME_MUTANTS = "tests.race.runtime_mutants"
"""The module holding the runtime mutant catalogue and its runner, under the repository root."""
TEARDOWN_MUTANTS = "tests.race.teardown_mutants"
"""The module holding the teardown mutants of the activation registry and their runner; its
``hunt_by_name`` runs the subagent behaviour tests and names the first that fails."""

_UNMUTATED_FAILS = {
    RUNTIME_MUTANTS: "the race machine already fails on the unmutated runtime after {examples} "
    "examples ({error})",
    TEARDOWN_MUTANTS: "the subagent tests already fail on the unmutated registry ({error})",
}


class _RuntimeKill(Protocol):
    """What ``hunt_by_name`` of tests/race/runtime_mutants.py returns for one mutant."""

    mutant: str
    killed: bool
    examples: int
    seconds: float
    steps: int | None
    error: str | None
    shrink_cut: bool


class _RuntimeMutant(Protocol):
    name: str
    doc: str


def repository_root() -> Path:
    """The checkout this package runs from: the parent of ``fsm_core/`` if it holds
    pyproject.toml and ``tests/race/``; raises :class:`MutantError` otherwise."""
    package = Path(__file__).resolve().parents[1]
    root = package.parent
    catalogue = root / Path(*RUNTIME_MUTANTS.split(".")).with_suffix(".py")
    if not (root / "pyproject.toml").is_file() or not catalogue.is_file():
        raise MutantError(
            f"runtime mutants need the repository's tests/race/ (a developer tool): no "
            f"{catalogue.relative_to(root)} beside the package at {package}; run fsm-core from "
            "a checkout of the repository (python3 -m uv run --locked fsm-core mutants --runtime)"
        )
    return root


def _import_runtime_mutants(root: Path, catalogue: str) -> ModuleType:
    """The module ``catalogue`` of the checkout at ``root`` (never another ``tests``)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module(catalogue)
    found = Path(module.__file__ or "").resolve()
    if not found.is_relative_to(root):
        raise MutantError(f"{catalogue} was imported from {found}, not from {root}")
    return module


def _runtime_worker(root: str) -> None:
    """Set up a worker process: the checkout on sys.path, runtime logging kept quiet, SIGINT
    left to the parent."""
    _ignore_sigint()
    if root not in sys.path:
        sys.path.insert(0, root)
    _quiet_runtime_logs()


def _quiet_runtime_logs() -> None:
    # Mutants make listeners, drivers and tasks fail; the runtime (and asyncio, for a task
    # whose failure nobody awaited) logs that, and the race machine judges it. Without a
    # handler Python would print every record to stderr, around the kill table.
    for name in ("fsm_core", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def _hunt(catalogue: str, name: str, shrink: bool) -> _RuntimeKill:
    """``hunt_by_name`` of the module ``catalogue`` (already on sys.path) for one mutant."""
    kill: _RuntimeKill = importlib.import_module(catalogue).hunt_by_name(name, shrink=shrink)
    return kill


def _hunt_all(
    root: Path, work: Sequence[tuple[str, str]], jobs: int | None, shrink: bool
) -> list[_RuntimeKill]:
    """:func:`_hunt` for each ``(catalogue, name)`` (the unmutated runs included), in order."""
    args = [(catalogue, name, shrink) for catalogue, name in work]
    workers = max(1, min(jobs or _DEFAULT_JOBS, len(work)))
    if workers == 1:
        _quiet_runtime_logs()
        return [_hunt(*a) for a in args]
    with Pool(workers, _runtime_worker, (str(root),)) as pool:
        return pool.starmap(_hunt, args, chunksize=1)


def _select_runtime(
    catalogues: Sequence[ModuleType], names: Sequence[str]
) -> list[list[_RuntimeMutant]]:
    """Each catalogue's mutants named in ``names`` (all of them for none), in catalogue order;
    an unknown name raises."""
    known: list[str] = [name for module in catalogues for name in module.BY_NAME]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise _unknown(unknown[0], known, "runtime mutant")
    return [
        [m for m in module.BY_NAME.values() if not names or m.name in names]
        for module in catalogues
    ]


def run_runtime(args: argparse.Namespace) -> int:
    """``fsm-core mutants --runtime [NAME ...]``: the runtime and teardown kill tables; the
    exit status.

    Each catalogue's killer runs against the unmutated runtime too, alongside the mutants (the
    race machine for the agent mutants, the subagent tests for the teardown ones): if it fails
    there, a kill proves nothing and no table is printed. Exit 0 when every mutant is killed, 1
    on a survivor or a failing unmutated runtime; a missing tests/race, an unknown name or a
    stale edit raises :class:`MutantError` before any process starts.
    """
    start = time.perf_counter()
    root = repository_root()
    catalogues = [RUNTIME_MUTANTS, TEARDOWN_MUTANTS]
    modules = [_import_runtime_mutants(root, c) for c in catalogues]
    chosen = _select_runtime(modules, args.names)
    modules[0].check_edits([m for ms in chosen for m in ms])  # before any process starts
    unmutated: str = modules[0].UNMUTATED
    work = [
        (catalogue, name)
        for catalogue, mutants in zip(catalogues, chosen, strict=True)
        if mutants
        for name in (unmutated, *(m.name for m in mutants))
    ]
    kills_of = _hunt_all(root, work, args.jobs, getattr(args, "shrink", True))
    found = dict(zip(work, kills_of, strict=True))
    tables: list[str] = []
    kills: list[_RuntimeKill] = []
    for catalogue, mutants in zip(catalogues, chosen, strict=True):
        if not mutants:
            continue
        sanity = found[catalogue, unmutated]
        if sanity.killed:
            fails = _UNMUTATED_FAILS[catalogue].format(examples=sanity.examples, error=sanity.error)
            print(f"fsm-core: {fails}; a kill table would prove nothing", file=sys.stderr)
            return 1
        these = [found[catalogue, m.name] for m in mutants]
        table = format_runtime_table if catalogue == RUNTIME_MUTANTS else format_teardown_table
        tables.append(table(mutants, these))
        kills += these
    print("\n".join(tables), end="")
    survived = sum(not k.killed for k in kills)
    times = [k.seconds for k in kills if k.killed]
    median = f"{statistics.median(times):.2f}" if times else "-"
    print(
        f"Done. mutants={len(kills)} killed={len(kills) - survived} survived={survived} "
        f"median_kill_sec={median} sec={time.perf_counter() - start:.1f}"
    )
    return 1 if survived else 0


_NO_RACE_KILL = (
    "no rule reached the bug or no invariant saw it within the budget; add the rule or "
    "invariant to tests/race/agent.py"
)

_NO_TEST_KILL = "no subagent test failed; add the test to tests/runtime/test_subagents.py"

_FAILURE_WIDTH = 60
"""How much of a kill's final failure the table shows."""


def format_runtime_table(mutants: Sequence[_RuntimeMutant], kills: Sequence[_RuntimeKill]) -> str:
    """The runtime kill table: result, examples and seconds to the first failure, the shrunk
    program's steps and its failure, one line per mutant; then a note per survivor."""
    header = ("mutant", "result", "examples", "sec", "steps", "first line of the failure")
    lines = [header]
    notes: list[str] = []
    for m, k in zip(mutants, kills, strict=True):
        failure = k.error or "-"
        if len(failure) > _FAILURE_WIDTH:
            failure = failure[: _FAILURE_WIDTH - 3] + "..."
        if not k.killed:
            notes.append(f"{m.name} survived: {_NO_RACE_KILL}")
        steps = "-" if k.steps is None else f"<={k.steps}" if k.shrink_cut else str(k.steps)
        if k.shrink_cut:
            notes.append(
                f"{m.name}: Hypothesis stopped shrinking at its time limit; the program may be "
                "shorter than the steps shown"
            )
        result = "killed" if k.killed else "SURVIVED"
        lines.append((m.name, result, str(k.examples), f"{k.seconds:.2f}", steps, failure))
    return "\n".join([*aligned(lines, right=(2, 3, 4)), *notes]) + "\n"


def format_teardown_table(mutants: Sequence[_RuntimeMutant], kills: Sequence[_RuntimeKill]) -> str:
    """The teardown kill table: result, tests run and seconds to the first failing test, and
    that test with its error, one line per mutant; then a note per survivor."""
    lines = [("teardown mutant", "result", "tests", "sec", "killed by")]
    notes: list[str] = []
    for m, k in zip(mutants, kills, strict=True):
        if not k.killed:
            notes.append(f"{m.name} survived: {_NO_TEST_KILL}")
        result = "killed" if k.killed else "SURVIVED"
        lines.append((m.name, result, str(k.examples), f"{k.seconds:.2f}", k.error or "-"))
    return "\n".join([*aligned(lines, right=(2, 3)), *notes]) + "\n"


__all__ = [
    "MUTANTS",
    "UNMUTATED",
    "Kill",
    "Mutant",
    "MutantError",
    "configure",
    "format_runtime_table",
    "format_table",
    "format_teardown_table",
    "repository_root",
    "run",
    "run_mutant",
    "run_mutants",
    "run_runtime",
    "run_unmutated",
    "select",
    "show_mutant",
]
