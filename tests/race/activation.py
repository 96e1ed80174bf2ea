"""The activation race machine: Hypothesis drives ``rt.subagents`` against specs/activation.toml.

:class:`ActivationRaceMachine` owns a private event loop (:class:`~tests.race.bridge.LoopBridge`),
a :class:`~fsm_core.runtime.Runtime` with a host-owned agent ``host``, and a
:class:`~tests.race.lockstep.Recorder` with its :class:`~tests.race.lockstep.Oracle` on the
hosted table of every activation the registry creates (cold resumes included). Rules start
children and grandchildren, deliver follow-ups, cancel any agent, dispose any activation, run
the three drains, answer a held model request (so a child finishes its work and settles on its
own), hold a session's flushes at a gate, and make a session's flushes fail (a failing teardown
boundary). Every child model request waits at a cooperating gate until a rule answers it or a
cancel aborts it; the host answers at once.

After each rule the invariants check that:

- every activation's control state is the table's: the oracle replays every event the
  registry fired on it (rows, effects, refusals, re-entrant fires inside their effect) and
  lands in the same state; the table's invariants hold at every notification;
- the registry's ledger is the table's: resident, slot and ownership held exactly while the
  table says so, ``children`` iff the activation owns an unsettled child;
- each activation is torn down once (one ``close_inbox``, one ``subagent/settled``), only after
  every child it owned left the registry, and its parent got one settlement notice for it;
- a settled activation's ``failed`` is its own failing boundary or a failing child's, and a
  teardown's :class:`~fsm_core.runtime.ActivationTeardownFailed` names exactly the failing
  activations of the subtree it tore down, in the documented text;
- nothing leaks: no registry entry, slot, owner or watcher outlives its activation, and once
  the runtime is closed every task has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fsm_core import UsageError
from fsm_core.runtime import (
    AbortSignal,
    ActivationSettled,
    ActivationTeardownFailed,
    Agent,
    MessageInserted,
    Reply,
    Request,
    Runtime,
    SubagentError,
    UserMessage,
)
from fsm_core.runtime._subagents import Subagents, _Node
from fsm_core.testing import Gate
from tests.race.bridge import LoopBridge
from tests.race.lockstep import Oracle, Recorder
from tests.runtime.subagent_support import HeldSession

__all__ = ["ActivationRaceMachine"]

picks = st.integers(min_value=0, max_value=7)
"""Which activation (or gate) a rule takes, modulo how many there are."""

_NOTICE = re.compile(r"^(.+):settled:\d+$")
_FAILED_TEXT = re.compile(r"^the teardown of (.+) failed at (\d+) (boundary|boundaries): (.+)$")


@dataclass(eq=False)
class Tracked:
    """One activation (one epoch of a child id) and what the machine knows of it."""

    node: _Node
    recorder: Recorder
    oracle: Oracle
    parent: Tracked | None
    settled: int = 0
    own_failed: bool | None = None
    """Whether its session failed its flushes when it settled (None before)."""
    parent_stage_then: str = ""
    """The parent activation's stage when this one settled."""
    children: list[Tracked] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.node.id

    def subtree(self) -> list[Tracked]:
        """It and every descendant torn down as part of its teardown."""
        out = [self]
        for child in self.children:
            if child.settled and child.parent_stage_then != "active":
                out += child.subtree()
        return out


class _Model:
    """Every child request waits at a fresh cooperating gate; the host answers at once."""

    def __init__(self, machine: ActivationRaceMachine) -> None:
        self.machine = machine

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        if request.agent_id == "host":
            return Reply("host: ok")
        gate = Gate(f"model {request.agent_id}")
        held = self.machine.held
        held.append(gate)
        try:
            await gate.wait(signal)
        finally:
            held.remove(gate)
        return Reply(f"{request.agent_id}: done")


class ActivationRaceMachine(RuleBasedStateMachine):
    """Random programs of subagent calls on a real runtime, checked against the table."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.held: list[Gate] = []
        self.tracked: list[Tracked] = []
        self.sessions: dict[str, HeldSession] = {}
        self.outcomes: list[tuple[Tracked | None, BaseException | None]] = []
        """Each finished teardown call: the activation disposed (None for a drain), its error."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.notices: Counter[str] = Counter()
        self.expected_notices: Counter[str] = Counter()
        self.counter = 0
        self.bridge = LoopBridge(self._settled, self._describe, max_iterations=2_000)
        self.rt = Runtime(_Model(self))
        self.registry = self.rt.subagents
        self._latest: dict[str, Tracked] = {}
        create = self.bridge.loop.run_until_complete(self.rt.create_agent("host"))
        self.host: Agent = create.agent
        self._wrap(self.registry)
        self.rt.events.on("subagent/settled", self._on_settled)
        self.rt.events.on("inbox/inserted", self._on_inserted)

    # --- plumbing -------------------------------------------------------------------------

    def _wrap(self, registry: Subagents) -> None:
        """Attach a recorder to each activation's table as the registry creates it."""
        new_node = registry._new_node

        def recorded(
            child_id: str, parent_agent: Agent, parent: _Node | None, session: Any
        ) -> _Node:
            node = new_node(child_id, parent_agent, parent, session)
            parent_tracked = None if parent is None else self._tracked_of(parent)
            tracked = Tracked(
                node, Recorder(node.control), Oracle(node.control.spec), parent_tracked
            )
            if parent_tracked is not None:
                parent_tracked.children.append(tracked)
            self.tracked.append(tracked)
            self._latest[child_id] = tracked
            return node

        registry._new_node = recorded  # type: ignore[method-assign]

    def _tracked_of(self, node: _Node) -> Tracked:
        return next(t for t in self.tracked if t.node is node)

    def _on_settled(self, event: ActivationSettled) -> None:
        node = event.activation._node
        assert isinstance(node, _Node)
        tracked = self._tracked_of(node)
        tracked.settled += 1
        session = self.sessions[node.id]
        tracked.own_failed = session.error is not None
        if tracked.parent is not None:
            tracked.parent_stage_then = tracked.parent.node.stage
        for other in self.registry._resident.values():
            ancestor = other.parent
            while ancestor is not None:
                if ancestor is node:
                    self.problems.append(
                        f"{node.id} settled while its descendant {other.id} is resident"
                    )
                ancestor = ancestor.parent
        if node.owned:
            self.problems.append(f"{node.id} settled owning {list(node.owned)}")
        if node.parent_agent.phase not in ("disposing", "disposed"):
            self.expected_notices[node.id] += 1
        if self.notices[node.id] != self.expected_notices[node.id]:
            self.problems.append(
                f"{node.id} settled with {self.notices[node.id]} notices sent, "
                f"{self.expected_notices[node.id]} expected"
            )

    def _on_inserted(self, event: MessageInserted) -> None:
        found = _NOTICE.match(event.message.id)
        if found:
            self.notices[found.group(1)] += 1

    def _run(self, action: Callable[[], object]) -> None:
        self.bridge.run(action)

    def _spawn(self, make: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        async def run() -> None:
            await make()

        def start() -> None:
            task = self.bridge.loop.create_task(run(), name=name)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        self._run(start)

    def _teardown_call(self, tracked: Tracked | None, make: Callable[[], Any]) -> None:
        """Start a teardown entry inside the rule (it begins in the call), await it in a task."""

        def begin() -> None:
            try:
                pending = make()
            except SubagentError as refused:
                self.outcomes.append((tracked, refused))
                return

            async def wait() -> None:
                try:
                    await pending
                except ActivationTeardownFailed as error:
                    self.outcomes.append((tracked, error))
                else:
                    self.outcomes.append((tracked, None))

            task = self.bridge.loop.create_task(wait(), name="teardown call")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        self._run(begin)

    def _live(self) -> list[Tracked]:
        return [t for t in self.tracked if t.node.stage == "active"]

    def _pick(self, pick: int) -> Tracked | None:
        live = self._live()
        return live[pick % len(live)] if live else None

    def _any(self, pick: int) -> Tracked:
        return self.tracked[pick % len(self.tracked)]

    def _settled(self) -> bool:
        if self.held or any(
            s.gate is not None and not s.gate.is_open for s in self.sessions.values()
        ):
            return True
        return all(t.node.stage in ("active", "settled") for t in self.tracked)

    def _describe(self) -> str:
        stages = ", ".join(f"{t.id}:{t.node.stage}" for t in self.tracked)
        return f"{self.registry!r} [{stages}] held={self.held}"

    # --- rules ----------------------------------------------------------------------------

    @rule(pick=picks, under_host=st.booleans())
    def start(self, pick: int, under_host: bool) -> None:
        parent = self._pick(pick)
        agent = self.host if under_host or parent is None else parent.node.agent
        self.counter += 1
        child_id = f"a{self.counter}"
        session = HeldSession()
        self.sessions[child_id] = session

        async def start() -> None:
            try:
                await self.registry.start(agent, child_id, "work", session=session.session)
            except SubagentError as refused:
                if refused.code not in ("DRAINING", "UNAUTHORIZED"):
                    self.problems.append(f"start {child_id}: {refused.code} {refused}")
                if refused.code == "DRAINING" and not self._drain_covers(agent):
                    self.problems.append(f"start {child_id} refused DRAINING: {refused}")

        self._spawn(start, f"start {child_id}")

    def _drain_covers(self, agent: Agent) -> bool:
        if self.registry.draining or agent.id in self.registry._drained_hosts:
            return True
        node = self.registry._resident.get(agent.id)
        return node is not None and (node.value("draining") != "none" or node.stage != "active")

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks)
    def followup(self, pick: int) -> None:
        tracked = self._any(pick)
        child_id = tracked.id
        self.counter += 1
        message = UserMessage(f"m{self.counter}", "more")

        async def deliver() -> None:
            try:
                await self.registry.followup(child_id, message)
            except SubagentError as refused:
                if refused.code not in ("DRAINING", "ACTIVATION_CLOSING"):
                    self.problems.append(f"followup {child_id}: {refused.code} {refused}")
            except UsageError as refused:
                # A settled child is forgotten once its parent agent is disposed.
                if tracked.node.parent_agent.phase != "disposed":
                    self.problems.append(f"followup {child_id}: {refused}")

        self._spawn(deliver, f"followup {child_id}")

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks)
    def cancel(self, pick: int) -> None:
        tracked = self._any(pick)
        if tracked.node.agent.phase not in ("disposing", "disposed"):
            self._run(tracked.node.agent.cancel)

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks)
    def dispose(self, pick: int) -> None:
        tracked = self._any(pick)
        self._teardown_call(tracked, lambda: self.registry.dispose(tracked.node.public))

    @rule()
    def drain(self) -> None:
        self._teardown_call(None, self.registry.drain)

    @rule(pick=picks, host=st.booleans())
    def drain_descendants(self, pick: int, host: bool) -> None:
        parent = self._pick(pick)
        agent = self.host if host or parent is None else parent.node.agent
        self._teardown_call(None, lambda: self.registry.drain_descendants([agent]))

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks, other=picks, wrong_parent=st.booleans())
    def drain_children(self, pick: int, other: int, wrong_parent: bool) -> None:
        tracked = self._any(pick)
        named = [tracked.id, self._any(other).id]
        parent = tracked.node.parent_agent
        if wrong_parent:
            parent = self.host if parent is not self.host else tracked.node.agent

        def drain() -> Any:
            try:
                return self.registry.drain_children(parent, named)
            except SubagentError as refused:
                if refused.code != "UNAUTHORIZED":
                    raise
                if not wrong_parent and parent.phase not in ("disposing", "disposed"):
                    owners = [self.registry.owner(i) for i in named if i in self.registry.resident]
                    if all(o == parent.id for o in owners):
                        self.problems.append(f"drain_children refused its own children: {refused}")
                raise

        self._teardown_call(None, drain)

    @precondition(lambda self: bool(self.held))
    @rule(pick=picks)
    def answer(self, pick: int) -> None:
        gate = self.held[pick % len(self.held)]
        self._run(gate.open)

    @precondition(lambda self: bool(self._live()))
    @rule(pick=picks)
    def fail_teardown(self, pick: int) -> None:
        tracked = self._pick(pick)
        assert tracked is not None
        self.sessions[tracked.id].fail()

    @precondition(lambda self: bool(self._live()))
    @rule(pick=picks)
    def hold_flushes(self, pick: int) -> None:
        tracked = self._pick(pick)
        assert tracked is not None
        session = self.sessions[tracked.id]
        if session.gate is None or session.gate.is_open:
            session.hold(Gate(f"flush {tracked.id}"))

    @precondition(
        lambda self: any(s.gate is not None and not s.gate.is_open for s in self.sessions.values())
    )
    @rule(pick=picks)
    def release_flushes(self, pick: int) -> None:
        gates = [
            s.gate for s in self.sessions.values() if s.gate is not None and not s.gate.is_open
        ]
        gate = gates[pick % len(gates)]
        self._run(gate.open)

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def the_registry_runs_the_table(self) -> None:
        for tracked in self.tracked:
            tracked.oracle.follow(tracked.recorder.roots)
            if not tracked.recorder.busy:
                assert tracked.oracle.state == tracked.node.control.snapshot(), tracked.id
        problems = [p for t in self.tracked for p in t.recorder.problems]
        assert not problems, problems

    @invariant()
    def the_ledger_is_the_tables(self) -> None:
        registry = self.registry
        for tracked in self.tracked:
            node = tracked.node
            current = self._latest[node.id] is tracked
            resident = registry._resident.get(node.id) is node
            assert resident == node.value("resident"), (node.id, resident)
            if current:
                assert (node.id in registry._slots) == node.value("slot"), node.id
                assert (node.id in registry._owners) == node.value("owned"), node.id
            assert bool(node.owned) == node.value("children"), (node.id, list(node.owned))
            for child_id in node.owned:
                child = registry._resident.get(child_id)
                assert child is not None and child.parent is node, (node.id, child_id)
        assert set(registry._resident) == {t.id for t in self.tracked if t.node.stage != "settled"}

    @invariant()
    def each_activation_is_torn_down_once_child_first(self) -> None:
        assert not self.problems, self.problems
        for tracked in self.tracked:
            closes = sum(
                e.name == "close_inbox"
                for r in tracked.recorder.roots
                for f in r.walk()
                for e in f.effects
            )
            assert closes <= 1, f"{tracked.id} closed its inbox {closes} times"
            assert tracked.settled == (tracked.node.stage == "settled"), tracked.id

    @invariant()
    def failures_are_aggregated(self) -> None:
        for tracked in self.tracked:
            if not tracked.settled:
                continue
            expected = bool(tracked.own_failed) or any(
                c.node.failed
                for c in tracked.children
                if c.settled and c.parent_stage_then != "active"
            )
            assert tracked.node.failed == expected, (tracked.id, tracked.node.failed, expected)
        for disposed, error in self.outcomes:
            if error is None:
                if disposed is not None:
                    assert not disposed.node.failed, disposed.id
                continue
            if not isinstance(error, ActivationTeardownFailed):
                continue
            found = _FAILED_TEXT.match(str(error))
            assert found is not None, str(error)
            assert int(found.group(2)) == len(error.failures) > 0
            assert found.group(4) == "; ".join(str(f) for f in error.failures)
            if disposed is not None:
                assert error.activation == disposed.id
                expected_ids = {t.id for t in disposed.subtree() if t.own_failed}
                assert {f.activation for f in error.failures} == expected_ids, (
                    str(error),
                    expected_ids,
                )
        self.outcomes.clear()

    @invariant()
    def nothing_leaks(self) -> None:
        registry = self.registry
        live = {t.id for t in self.tracked if t.node.stage != "settled"}
        assert set(registry._slots) <= live, f"slots of settled activations: {registry._slots}"
        watched = {t.get_name().removeprefix("watch ") for t in registry._watchers}
        assert watched <= live, f"watchers of settled activations: {watched - live}"
        for roots in registry._roots.values():
            assert set(roots) <= live, f"settled roots: {roots}"
        if not live:
            assert not registry._owners and not registry._slots, registry

    def teardown(self) -> None:
        """Close the runtime (every teardown must converge), check nothing is left, close."""
        try:
            if not self.bridge.loop.is_closed():
                for gate in [*self.held]:
                    gate.open()
                for session in self.sessions.values():
                    if session.gate is not None:
                        session.gate.open()
                closing = self.bridge.spawn(self._aclose(), "aclose")
                self.bridge.settle()  # bounded: a teardown that never converges fails here
                assert closing.done(), f"aclose() never returned: {self._describe()}"
                closing.result()
                self.the_registry_runs_the_table()
                leftover = [t for t in self.bridge.pending() if t is not closing]
                assert not leftover, leftover
                registry = self.registry
                assert not registry._resident and not registry._slots and not registry._owners
                assert not registry._watchers
                assert not self.problems, self.problems
        finally:
            self.bridge.close(self._open_everything)

    async def _aclose(self) -> None:
        # A failing session's teardown fails the close too; failures_are_aggregated judged
        # every teardown it saw.
        with contextlib.suppress(ActivationTeardownFailed, BaseExceptionGroup):
            await self.rt.aclose()
        while self.tasks:
            await asyncio.wait(list(self.tasks))

    def _open_everything(self) -> bool:
        gates = [*self.held, *(s.gate for s in self.sessions.values() if s.gate is not None)]
        opened = [g for g in gates if not g.is_open]
        for gate in opened:
            gate.open()
        return bool(opened)

    def check(self) -> None:
        """Run every ``@invariant`` now, as Hypothesis does after each step."""
        self.the_registry_runs_the_table()
        self.the_ledger_is_the_tables()
        self.each_activation_is_torn_down_once_child_first()
        self.failures_are_aggregated()
        self.nothing_leaks()

    def __repr__(self) -> str:
        return f"<ActivationRaceMachine {self._describe()}>"
