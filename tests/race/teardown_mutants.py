"""Teardown mutants: plausible bugs in the activation registry (``rt.subagents``), each of which
the subagent behaviour tests must kill.

They use the runtime mutants' mechanism (:class:`~tests.race.runtime_mutants.RuntimeMutant`:
exact textual edits of one function's source, switched on by monkeypatching in this process
only). The killer is the behaviour suite itself: :func:`kills` runs :func:`killer_tests`
(``tests/runtime/test_subagents.py``, ``_spawn.py``, ``_door.py``, ``_host_disposal.py``,
``_shut.py`` and ``_parent_cancel.py``, then the passing tests of
``test_issue22_teardown.py``) in order with the mutant on and reports the first that
fails (a hang counts, through a watchdog alarm). :data:`RACE_KILLED` names the mutants the
activation race machine alone must kill too (:func:`race_kills`).
:func:`hunt_by_name` is the entry point ``fsm-core mutants --runtime`` runs beside the agent
mutants of ``runtime_mutants.py``.
"""

from __future__ import annotations

import inspect
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, ModuleType

from tests.race.runtime_mutants import UNMUTATED, Edit, RuntimeKill, RuntimeMutant, activated

REGISTRY = "fsm_core.runtime._subagents:Subagents"
NODE = "fsm_core.runtime._node:Node"
DOOR = "fsm_core.runtime._door:Door"
WIRES = "fsm_core.runtime._wires:Wires"
WATCHER = "fsm_core.runtime._watcher:Watcher"
LEDGER = "fsm_core.runtime._ledger:Ledger"


def _edit(method: str, old: str, new: str, owner: str = REGISTRY) -> Edit:
    return Edit(f"{owner}.{method}", old, new)


TEARDOWN_MUTANTS: tuple[RuntimeMutant, ...] = (
    RuntimeMutant(
        "children_not_disposed",
        "dispose_children disposes nobody: the parent's teardown leaves its children running.",
        (
            _edit(
                "queue_children",
                "self._cascade.append((node, child, join, call, values))",
                "pass",
                WIRES,
            ),
        ),
    ),
    RuntimeMutant(
        "sibling_stopped_by_failure",
        "finishDisposal stops joining its children at the first that failed.",
        (
            _edit(
                "_finish",
                "            await asyncio.wait(pending)\n",
                "            await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)\n"
                "            if any(f.exception() for f in self.child_teardowns if f.done()):\n"
                "                break\n",
                NODE,
            ),
        ),
    ),
    RuntimeMutant(
        "slot_released_twice",
        "releasing ownership releases the pool slot once more.",
        (
            _edit(
                "_release_ownership",
                "    self.tree.ledger.disown(self)\n",
                "    self.tree.ledger.disown(self)\n    self._release_slot()\n",
                NODE,
            ),
        ),
    ),
    RuntimeMutant(
        "notice_before_registry_exit",
        "the activation leaves the registry only when ownership is released, after the notice.",
        (
            _edit("_leave_registry", "    self.tree.ledger.leave(self)\n", "    pass\n", NODE),
            _edit(
                "_release_ownership",
                "    self.tree.ledger.disown(self)\n",
                "    self.tree.ledger.disown(self)\n    self.tree.ledger.leave(self)\n",
                NODE,
            ),
        ),
    ),
    RuntimeMutant(
        "memo_lost",
        "dispose() of an activation already closing starts a second teardown instead of "
        "returning the memoized one.",
        (
            _edit(
                "dispose",
                "asyncio.shield(self._dispose(node, False))",
                "asyncio.shield(\n"
                "        self._dispose(node, False) if node.closing is None\n"
                "        else persist(node._finish, 'again')\n"
                "    )",
            ),
        ),
    ),
    RuntimeMutant(
        "watcher_reads_execution_state",
        "the watcher judges pending work by the agent's status instead of its inbox.",
        (
            _edit(
                "_verdict",
                "pending = node.agent.inbox.pending",
                'pending = node.agent.status == "running"',
                WATCHER,
            ),
        ),
    ),
    RuntimeMutant(
        "busy_taken_for_ready",
        "a watcher refused maintenance (the agent is busy again) disposes it anyway.",
        (
            _edit(
                "_watch",
                "                self._verdict(node, verdict, seen, busy=True)\n",
                '                node.fire("dispose", final_state_flushed=True, drain=False)\n'
                "                return\n",
                WATCHER,
            ),
        ),
    ),
    RuntimeMutant(
        "teardown_clears_the_inbox",
        "the teardown's cancel clears the inbox (the registry overrides the wiring's keep_inbox): "
        "queued work never reaches the capture.",
        (
            _edit(
                "_call",
                "    args = call.keywords(values, facts)\n",
                "    args = call.keywords(values, facts)\n"
                "    if 'keep_inbox' in args:\n"
                "        args['keep_inbox'] = False\n",
                WIRES,
            ),
        ),
    ),
    RuntimeMutant(
        "failures_not_aggregated",
        "a teardown reports only its own boundaries, dropping its children's failures.",
        (
            _edit(
                "_finish",
                "self.failures[:0] = failures(self.child_teardowns, escaped)",
                "failures(self.child_teardowns, escaped)",
                NODE,
            ),
        ),
    ),
    RuntimeMutant(
        "failure_swallowed",
        "the rethrow step is lost: a failed teardown resolves as if it succeeded.",
        (_edit("_rethrow", "self.rethrow = True", "pass", NODE),),
    ),
    RuntimeMutant(
        "ownership_never_released",
        "ownership is never released: the child's id stays taken after it settled.",
        (_edit("_release_ownership", "    self.tree.ledger.disown(self)\n", "    pass\n", NODE),),
    ),
    RuntimeMutant(
        "drain_keeps_admitting",
        "drain() tears the roots down but does not close admission.",
        (
            _edit(
                "_drain",
                'self._door.fire("drain", drain)',
                "for root in [n for n in self._resident.values() if n.parent is None]:\n"
                '            root.fire("drain", scope="registry")',
            ),
        ),
    ),
    RuntimeMutant(
        "lineage_unchecked",
        "drain_children tears down any named activation, whoever its parent is.",
        (_edit("drain_children", "if node.parent_agent is not parent:", "if False:"),),
    ),
    RuntimeMutant(
        "spawned_child_cancelled_as_user",
        "a spawned child is cancelled with the user cause when its parent's turn aborts.",
        (_edit("_cancel_spawned", "agent.cancel(PARENT)", "agent.cancel()", DOOR),),
    ),
    RuntimeMutant(
        "child_of_disposed_parent_remembered",
        "the door is told every settled child's parent is live: a child whose parent is "
        "disposing or gone is remembered for a cold resume nobody may make.",
        (
            _edit(
                "_facts",
                'facts["parent"] = self._ledger.parent_kind(source.parent_agent)[0]',
                'facts["parent"] = (\n'
                '            "host" if call.event == "release"\n'
                "            else self._ledger.parent_kind(source.parent_agent)[0]\n"
                "        )",
                WIRES,
            ),
        ),
    ),
    RuntimeMutant(
        "stale_parent_noticed",
        "the door is told a root's host parent is live even once it is disposed: the notice is "
        "sent to a disposed agent.",
        (
            _edit(
                "_facts",
                'facts["parent"] = self._ledger.parent_kind(source.parent_agent)[0]',
                'facts["parent"] = (\n'
                '            "host" if call.event == "root_settled"\n'
                "            else self._ledger.parent_kind(source.parent_agent)[0]\n"
                "        )",
                WIRES,
            ),
        ),
    ),
    RuntimeMutant(
        "host_roots_disposed_before_admission_closes",
        "drain_descendants disposes a host parent's roots before closing admission below it: a "
        "listener on a root's disposal still admits a child there.",
        (
            _edit(
                "_close_below_host",
                "self._ledger.drained_hosts[self._about(DrainBelow).parent] = None",
                "pass",
                DOOR,
            ),
            _edit(
                "_dispose_roots",
                "    )\n",
                "    )\n    self._ledger.drained_hosts[below.parent] = None\n",
                DOOR,
            ),
        ),
    ),
    RuntimeMutant(
        "spawn_wakes_under_an_aborted_turn",
        "a child spawned under an already aborted parent turn is woken: it runs a model turn "
        "no abort reaches.",
        (_edit("_run_child", '"run_child", (wake,)', '"run_child", (True,)', DOOR),),
    ),
    RuntimeMutant(
        "disposed_parent_not_forgotten",
        "agent/disposed never reaches the door: a disposed parent's settled children stay "
        "remembered.",
        (
            _edit(
                "parent_gone",
                'self._wires.agent_to_door("publish_disposed", '
                "DrainBelow(ended.agent, None, []), None)",
                "pass",
                DOOR,
            ),
        ),
    ),
    RuntimeMutant(
        "disposing_host_leaves_roots_running",
        "agent/disposing never reaches the door: a disposed host parent's roots run on with "
        "nobody to hear them, and its settled children stay remembered while it disposes.",
        (
            _edit(
                "parent_disposing",
                '    self._wires.agent_to_door("publish_disposing", drain, kind)\n',
                "    pass\n",
                DOOR,
            ),
        ),
    ),
    RuntimeMutant(
        "teardown_cut_by_interrupt",
        "a listener's BaseException held by a teardown row ends the teardown at the stage that "
        "row reached: the activation stays resident, holding its slot.",
        (
            _edit(
                "_step",
                "except (Exception, asyncio.CancelledError):",
                "except BaseException:",
                NODE,
            ),
        ),
    ),
    RuntimeMutant(
        "handle_disposal_lost_to_interrupt",
        "an agent/disposing listener's BaseException escapes the handle's dispose() before the "
        "activation keeps the disposal it began: its teardown has nothing to await.",
        (
            _edit(
                "_call",
                "            finally:\n",
                "            except BaseException:\n                raise\n            else:\n",
                WIRES,
            ),
        ),
    ),
    RuntimeMutant(
        "spawn_cancel_recurses",
        "a spawned child's cancel inside another's runs at once: a deep spawn chain takes "
        "frames per generation, and a RecursionError stops the cancel part way.",
        (_edit("_cancel_spawned", "    if self._cancelling:\n", "    if False:\n", DOOR),),
    ),
    RuntimeMutant(
        "nested_spawn_cancel_dropped",
        "a spawned child's cancel inside another's is dropped: its grandparent's cancelled "
        "turn waits for a grandchild that runs on.",
        (
            _edit(
                "_cancel_spawned",
                "    self._spawned.append(child)\n"
                "    if self._cancelling:\n"
                "        return  # the outermost call cancels it\n",
                "    if self._cancelling:\n        return\n    self._spawned.append(child)\n",
                DOOR,
            ),
        ),
    ),
    RuntimeMutant(
        "notice_refusal_swallowed",
        "a settlement notice the tables allowed but the parent agent refused is dropped "
        "without a word, not raised to the teardown's callers as a bug between the tables.",
        (
            _edit(
                "connect",
                "                self.scope.held = self.scope.held or bug\n",
                '                if "notice" not in call.id:\n'
                "                    self.scope.held = self.scope.held or bug\n",
                WIRES,
            ),
        ),
    ),
    RuntimeMutant(
        "notice_id_unchecked",
        "a settlement notice takes the next id of its scheme even when its parent holds a "
        "message of that id: the parent's inbox holds the id twice and drifts from its table.",
        (_edit("notice", "    if not pending._holds(notice_id):\n", "    if True:\n", LEDGER),),
    ),
    RuntimeMutant(
        "close_leaves_waking_open",
        "the close does not shut the agent's waking (wiring close.shuts_agent): a message sent "
        "straight to a closing activation's agent runs a model turn, or replays a latched wake, "
        "while the teardown waits.",
        (
            _edit(
                "_close_inbox",
                'self.tree.wires.connect("activation", "close_inbox", (), self)',
                "pass",
                NODE,
            ),
        ),
    ),
    RuntimeMutant(
        "notice_parks_a_live_parent",
        "a child's settlement notice reaches its live parent activation's agent parked, not "
        "waking it: a parent idle while its child worked, or stopped by a user's cancel, never "
        "takes it.",
        (_edit("_notice_agent", "(wake,)", "(False,)", NODE),),
    ),
)

BY_NAME = {m.name: m for m in TEARDOWN_MUTANTS}

RACE_KILLED = ("close_leaves_waking_open", "notice_parks_a_live_parent")
"""The mutants the activation race machine alone must kill (:func:`race_kills`), under the
``ci`` budget: the moves that would have found them (sends straight to a closing activation's
agent, a parent's cancel while its children run) were added for bugs like these, and the old
machine let both survive."""


class _Hang(Exception):
    """The watchdog fired: the mutant wedged a test."""


@contextmanager
def _watchdog(seconds: int) -> Iterator[None]:
    def fire(_signum: int, _frame: FrameType | None) -> None:
        raise _Hang(f"no return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    # It fires again every second: a wedged test's clean-up (its runtime's aclose) may wedge too.
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def behaviour_tests(*modules: ModuleType) -> list[tuple[str, Callable[[], None]]]:
    """The ``test_*`` functions of ``modules``, in source order, but those a call with no
    arguments cannot run (parametrized, or taking a fixture) and those expected to fail."""
    out = []
    for module in modules:
        for name, value in vars(module).items():
            if not (name.startswith("test_") and callable(value)):
                continue
            marks = {m.name for m in getattr(value, "pytestmark", ())}
            if marks & {"xfail", "parametrize"} or inspect.signature(value).parameters:
                continue
            out.append((f"{module.__name__.rpartition('.')[2]}::{name}", value))
    return out


def kills(
    mutant: RuntimeMutant | None, tests: list[tuple[str, Callable[[], None]]], watchdog: int = 10
) -> str | None:
    """The first of ``tests`` that fails with ``mutant`` switched on, or None if all pass."""
    with activated(mutant):
        for name, test in tests:
            try:
                with _watchdog(watchdog):
                    test()
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as error:  # pytest's failures and _Hang included
                return f"{name}: {type(error).__name__}"
    return None


def killer_tests() -> list[tuple[str, Callable[[], None]]]:
    """The subagent behaviour tests, in source order, but the deep chain (it costs seconds and
    kills nothing the others do not), then issue 22's that pass (its deep spawn chain, in a
    few milliseconds, is the only one to kill a spawn cancel that recurses). The two newest
    subagent modules come after the older: a mutant the older tests kill is not held up by
    one these wedge (the watchdog's seconds)."""
    from tests.runtime import (
        test_issue22_teardown,
        test_subagents,
        test_subagents_door,
        test_subagents_host_disposal,
        test_subagents_parent_cancel,
        test_subagents_shut,
        test_subagents_spawn,
    )

    tests = behaviour_tests(
        test_subagents,
        test_subagents_spawn,
        test_subagents_door,
        test_subagents_host_disposal,
        test_subagents_shut,
        test_subagents_parent_cancel,
    )
    return [t for t in tests if "deep" not in t[0]] + behaviour_tests(test_issue22_teardown)


def hunt_by_name(name: str, shrink: bool = True) -> RuntimeKill:
    """:func:`kills` for the mutant called ``name`` (:data:`UNMUTATED`: the shipped registry),
    as a :class:`RuntimeKill`: ``examples`` counts the tests run, ``error`` names the one that
    failed (``"module::test: Error"``). ``shrink`` is the agent hunt's and does not apply."""
    del shrink
    tests = killer_tests()
    start = time.perf_counter()
    killer = kills(None if name == UNMUTATED else BY_NAME[name], tests)
    seconds = time.perf_counter() - start
    names = [test for test, _ in tests]
    ran = len(tests) if killer is None else names.index(killer.split(": ", 1)[0]) + 1
    return RuntimeKill(name, killer is not None, ran, seconds, None, killer, seconds)


def race_kills(mutant: RuntimeMutant | None) -> str | None:
    """What the activation race machine *alone* (``tests/race/activation.py``, under the loaded
    Hypothesis profile and its CI settings, without shrinking) fails with when ``mutant`` is on,
    or None if it passes. ``python -m tests.race.teardown_mutants`` prints it for each mutant,
    a measure of the race machine beside :func:`kills` (the behaviour tests)."""
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from tests.race.activation import ActivationRaceMachine
    from tests.race.test_activation_race import TestActivationRaces

    fast = settings(TestActivationRaces.settings, phases=[Phase.explicit, Phase.generate])
    with activated(mutant), _watchdog(120):
        try:
            run_state_machine_as_test(ActivationRaceMachine, settings=fast)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:
            first = str(error).splitlines()[0] if str(error) else ""
            return f"{type(error).__name__}: {first[:200]}"
    return None


if __name__ == "__main__":
    import logging

    import tests.conftest  # noqa: F401  (the ci profile, as pytest loads it)

    logging.disable(logging.CRITICAL)
    for each in (None, *TEARDOWN_MUTANTS):
        began = time.perf_counter()
        found = race_kills(each)
        name = UNMUTATED if each is None else each.name
        print(f"{name:40} {time.perf_counter() - began:5.1f}s {found or 'survived'}", flush=True)
