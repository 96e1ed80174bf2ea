"""The activation race machine: Hypothesis drives ``rt.subagents`` against specs/activation.toml.

:class:`ActivationRaceMachine` owns a private event loop (:class:`~tests.race.bridge.LoopBridge`),
a :class:`~fsm_core.runtime.Runtime` with a host-owned agent ``host``, and a
:class:`~tests.race.lockstep.Recorder` with its :class:`~tests.race.lockstep.Oracle` on the
hosted table of every activation the registry creates (cold resumes included), and one on its
door (specs/admission.toml). Rules start children and grandchildren (below the host, an
activation, or a running spawned child, a host-owned parent disposed when its spawn returns),
deliver follow-ups, cancel any agent, dispose any activation, run the three drains
(drain_descendants naming one parent or several at once), answer a held model request (so a
child finishes its work and settles on its own), hold a session's flushes at a gate, and make
a session's flushes fail (a failing teardown boundary). Every child model request waits at a
cooperating gate until a rule answers it or a cancel aborts it; the host answers at once. Seed
000's subagent clauses run too: a rule asks a parent (the host, an activation, or a spawned
child) to spawn or fork a child from its ``delegate`` tool (which may wait for a rule before it
calls spawn, so a cancel or a drain lands first), then rules cancel that parent's turn or the
child itself, dispose the parent activation during the spawn, or drain while it runs. Each
program begins with a tree (:meth:`ActivationRaceMachine.grow`); other rules race four
teardown callers on one activation, queue a message without waking, and land a message at an
agent's idle before its watcher runs. Three more make the moves that found the recent bugs: a
message sent straight to an activation's agent (``act.agent.followup``, ``steer``,
``inject``, ``send`` waking or not) at any moment, in the very call that began its teardown, or
from a listener inside its agent's next cancel (:meth:`ActivationRaceMachine.send_straight`); a
user's cancel of a parent agent, clearing or keeping its inbox, while its children and
grandchildren run (:meth:`ActivationRaceMachine.cancel_parent`); and each kind of drain followed
by followups to what it drained and starts below their parent, while they close, after, or once
they settled (:meth:`ActivationRaceMachine.drain_then`).

After each rule the invariants check that:

- every activation's control state is the table's: the oracle replays every event the
  registry fired on it (rows, effects, refusals, re-entrant fires inside their effect) and
  lands in the same state; the table's invariants hold at every notification; so is the
  registry's door's (specs/admission.toml), replayed on its own oracle;
- the registry's ledger is the table's: resident, slot and ownership held exactly while the
  table says so, ``children`` iff the activation owns an unsettled child;
- each activation is torn down once (one ``close_inbox``, one ``subagent/settled``), only after
  every child it owned left the registry, and its parent got one settlement notice for it;
- a settled activation's ``failed`` is its own failing boundary or a failing child's, and a
  teardown's :class:`~fsm_core.runtime.ActivationTeardownFailed` names exactly the failing
  activations of the subtree it tore down, in the documented text;
- a teardown cancels with ``keep_inbox``: what was queued when it cancelled the agent is in its
  capture; the settlement notice comes only after the activation left the registry;
  ``drain_children`` never drains another parent's child;
- once an activation's close began (a dispose, a drain reaching it, the natural end's dispose),
  its agent makes no model request and starts no turn, whatever was sent to it and whatever it
  was doing; what was sent straight to it after the close (before its capture) is in its
  terminal capture, unless a user's clearing cancel discarded it since;
- a user's cancel of a parent is local to its own agent: no continuable descendant's agent is
  cancelled and no teardown begins in the call, each keeps its stage, phase and turns; a
  keep_inbox cancel discards nothing queued; a cancelled agent starts no turn until a message
  arrives, and a child's settlement notice wakes its live parent into a turn that takes it;
- each start is admitted exactly when its parent is live (host-owned, or an active activation's
  agent) and no drain the program ran covers it (``drain()``, a ``drain_descendants`` naming
  it); each followup is delivered to an active activation, refused by a closing one (or resumed
  cold after a natural end), and, once the child settled, resumed cold exactly when its parent
  is live and admits, so after ``drain_children`` a settled child resumes and its parent admits
  new children; every refusal's code is the one the table's row gives, as the oracle's replay
  of that refused call reads it (never a code written into the test);
- each spawn and fork: the tool runs as its parent before and after the call, the child's
  requests run as the child; a parent's aborted turn aborts the child with ``parent`` (its turn
  ends aborted, the tool raises Aborted and its result says aborted; one asked for under an
  already aborted turn makes no model request); a spawn after ``drain()`` is refused (with
  the door table's code) and creates no agent; the child is disposed and unregistered once
  the call returned;
- a drain's error names every failing activation it tore down; every dispose of one activation
  ends the same way; a natural end happens in maintenance with nothing queued, and an idle
  activation with no child and nothing queued has ended;
- a host-owned parent that began disposing (a user's dispose, or a spawn returning) leaves
  no active root: its dispose disposed them inside the call;
- nothing leaks: no registry entry, slot, owner or watcher outlives its activation, no
  settled child of a disposing host parent or a disposed parent is remembered for a cold
  resume, and once the runtime is closed every task (every spawn call included) has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fsm_core import Rejected, UsageError
from fsm_core.runtime import (
    PARENT,
    USER,
    Aborted,
    AbortSignal,
    ActivationSettled,
    ActivationTeardownFailed,
    Agent,
    MessageInserted,
    Reply,
    Request,
    Runtime,
    Session,
    SubagentError,
    SubagentSpec,
    ToolCall,
    UserMessage,
    initiating_agent,
)
from fsm_core.runtime._node import Node as _Node
from fsm_core.runtime._subagents import Subagents
from fsm_core.testing import Gate
from tests.race.bridge import LoopBridge
from tests.race.lockstep import Fire, Oracle, Recorder
from tests.runtime.subagent_support import HeldSession, turn_outcomes

__all__ = ["ActivationRaceMachine"]

picks = st.integers(min_value=0, max_value=7)
"""Which activation (or gate) a rule takes, modulo how many there are."""

_SENDS = ("followup", "steer", "inject", "wake", "quiet")
"""How a rule sends straight to an agent: ``followup``, ``steer``, ``inject``, or ``send``
waking (``wake``) or not (``quiet``)."""

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
    pending_at_cancel: tuple[str, ...] = ()
    """The messages queued when its teardown cancelled its agent (they must be captured)."""
    cleared: bool = False
    """A user's cancel discarded its queued work: a watcher waiting for that work waits on
    (nothing pokes it), so it need not end by itself (reported, not asserted)."""
    phase_at_cancel: str = ""
    """Its agent's phase when its teardown cancelled it (``idle``: nothing may wake it)."""
    closed: bool = False
    """Its close began (``close_inbox``): from here its agent's waking is shut."""
    captured: bool = False
    """Its teardown captured the terminal facts (``capture``)."""
    owed: set[str] = field(default_factory=set)
    """The messages its capture must hold: those queued at its teardown's cancel and those
    sent straight to its agent after its close began, less what a user's clearing cancel
    discarded since."""

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


@dataclass(eq=False)
class Spawn:
    """One ``spawn`` or ``fork`` a parent's tool ran, and what the machine saw of it."""

    id: str
    fork: bool
    parent_id: str
    """The agent whose model asked for the tool call: the child's parent."""
    signal: AbortSignal
    """The parent turn's signal the tool was given."""
    draining: bool
    """Whether the registry was draining when the tool called spawn (it must refuse)."""
    before: Agent | None
    """The initiating agent in the tool before the call; ``after`` once it returned."""
    after: Agent | None = None
    requests: list[tuple[AbortSignal, str | None]] = field(default_factory=list)
    """Each model request of the child: its signal and the initiating agent's id."""
    cancelled_directly: bool = False
    """A rule cancelled the child itself (reason user), not through its parent."""
    done: bool = False
    aborted_then: bool = False
    """Whether the parent's signal was aborted when the spawn call returned."""
    aborted_first: bool = False
    """Whether it was aborted already when the tool called spawn (the child runs no turn)."""
    error: BaseException | None = None
    text: str | None = None


def _instruction(request: Request) -> tuple[str, str] | None:
    """``("spawn" | "fork", child id)`` if the request's last message asks for one."""
    last = request.messages[-1] if request.messages else None
    if last is None or last.get("role") != "user":
        return None
    verb, _, child = str(last.get("text")).partition(" ")
    return (verb, child) if verb in ("spawn", "fork") and child else None


class _Delegate:
    """The tool a parent's model calls: spawn (or fork) the child it names, noting the
    initiating agent before and after, and how the call ended."""

    name = "delegate"

    def __init__(self, machine: ActivationRaceMachine) -> None:
        self.machine = machine

    async def execute(self, args: Any, signal: AbortSignal) -> Any:
        machine = self.machine
        registry = machine.registry
        before = initiating_agent()
        # drain() or the runtime's close: a turn the close reaches may call spawn after it began
        spawn = Spawn(args["id"], args["fork"], args["parent"], signal, registry.draining, before)
        machine.spawns[spawn.id] = spawn
        if spawn.id in machine.held_tools:
            # Held until a rule answers it, whatever its signal does: a cancel meanwhile makes
            # the spawn one asked for under an already aborted turn, a drain one refused.
            gate = Gate(f"tool {spawn.id}")
            machine.held.append(gate)
            try:
                await gate.wait(signal, cooperate=False)
            finally:
                machine.held.remove(gate)
            spawn.draining = registry.draining  # drain() or, once held, the runtime's close
        run = registry.fork if spawn.fork else registry.spawn
        spawn.aborted_first = signal.aborted
        machine.last_refused = None
        try:
            result = await run(signal, SubagentSpec(spawn.id, "work"))
        except BaseException as error:
            spawn.error = error
            if isinstance(error, SubagentError):
                machine._refused(f"spawn {spawn.id}", error)
            raise
        finally:
            spawn.after = initiating_agent()
            spawn.aborted_then = signal.aborted
            spawn.done = True
        spawn.text = result.text
        return result.text


class _Model:
    """Every child request waits at a fresh cooperating gate; the host answers at once. A
    request whose last message is ``spawn ID`` or ``fork ID`` calls the delegate tool."""

    def __init__(self, machine: ActivationRaceMachine) -> None:
        self.machine = machine

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        machine = self.machine
        who = initiating_agent()
        closed = None if who is None else machine.closed_agents.get(who)
        if closed is not None:
            machine.problems.append(
                f"{request.agent_id} made a model request after its activation's close began "
                f"({closed.node.stage})"
            )
        asked = _instruction(request)
        if asked is not None:
            verb, child = asked
            args = {"id": child, "fork": verb == "fork", "parent": request.agent_id}
            return Reply(
                tool_calls=(ToolCall(f"call {child}", "delegate", args),), finish="tool_calls"
            )
        spawn = self.machine.spawns.get(request.agent_id)
        if spawn is not None:
            who = initiating_agent()
            spawn.requests.append((signal, who and who.id))
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
        self.hidden: list[str] = []
        """Failing activations a drain tore down whose failure its error did not name."""
        """Each finished teardown call: the activation disposed (None for a drain), its error."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.notices: Counter[str] = Counter()
        self.expected_notices: Counter[str] = Counter()
        self.counter = 0
        self.bridge = LoopBridge(self._settled, self._describe, max_iterations=2_000)
        self.spawns: dict[str, Spawn] = {}
        self.held_tools: set[str] = set()
        """The spawns whose delegate tool waits at a held gate before it calls spawn."""
        self.dispose_results: dict[Tracked, BaseException | None] = {}
        """The outcome of the first dispose of each activation: every later one is the same."""
        self.drained = False
        """Whether a drain() rule ran: every later admission must be refused."""
        self.created: dict[str, Agent] = {}
        """Every agent the registry created (activations' and spawned children), by id."""
        self.rt = Runtime(_Model(self), [_Delegate(self)])
        self.registry = self.rt.subagents
        self._latest: dict[str, Tracked] = {}
        create = self.bridge.loop.run_until_complete(self.rt.create_agent("host"))
        self.host: Agent = create.agent
        self.closed_agents: dict[Agent, Tracked] = {}
        """The agent of each activation whose close began: none may make a model request or
        start a turn any more."""
        self.last_refused: tuple[Oracle, Fire] | None = None
        """The last call a table refused (on an activation or the door), with its oracle."""
        self.refusals: list[tuple[str, SubagentError, Oracle, Fire]] = []
        """Each refusal a caller got, and the refused call it follows: once the oracle has
        replayed that call, the caller's code must be the one the table's row gives."""
        self.drained_below: set[Agent] = set()
        """Every parent a drain_descendants call named (and did not refuse): admission below
        it is closed for good."""
        self.stopped: set[Agent] = set()
        """Agents a user's cancel stopped, until a message arrives: none may start a turn."""
        self.awaiting_turn: dict[Agent, set[str]] = {}
        """Settlement notices that reached a live parent agent (one a user's cancel stopped
        too): each must wake it into a turn that claims it, unless a later cancel of it
        clears or parks it, or its activation's close or its disposal parks it."""
        self.cancels: list[Agent] = []
        """Every agent/cancel-requested, in order: whose cancel was requested."""
        self.at_cancel: dict[Agent, str] = {}
        """Agents whose next cancel's notification sends them a message (how, as
        :data:`_SENDS`), from inside the listener."""
        self._wrap(self.registry)
        self.door_oracle = Oracle(self.registry._door.control.spec)
        self.door = Recorder(
            self.registry._door.control, lambda fire: self._note_refusal(self.door_oracle, fire)
        )
        """Every event the registry fires on its door (specs/admission.toml)."""
        self.rt.events.on("subagent/settled", self._on_settled)
        self.rt.events.on("inbox/inserted", self._on_inserted)
        self.rt.events.on("turn/start", self._on_turn)
        self.rt.events.on("agent/status", self._on_status)
        self.rt.events.on("agent/cancel-requested", self._on_cancel_requested)
        self.armed: dict[Agent, bool] = {}
        """Agents whose next idle gets a message before their watcher runs (True: quiet)."""

    # --- plumbing -------------------------------------------------------------------------

    def _wrap(self, registry: Subagents) -> None:
        """Attach a recorder to each activation's table as the registry creates it."""
        new_node = registry._tree.plant

        def recorded(
            child_id: str, parent_agent: Agent, parent: _Node | None, session: Any
        ) -> _Node:
            node = new_node(child_id, parent_agent, parent, session)
            perform = node.control._perform

            def snapshot(effect: Any) -> None:
                if effect.name == "close_inbox":
                    tracked.closed = True  # from here no request, no turn of its agent
                    self.closed_agents[node.agent] = tracked
                elif effect.name == "cancel_agent":
                    inbox = node.agent.inbox
                    queued = (*inbox.next_step, *inbox.next_turn)
                    tracked.pending_at_cancel = tuple(m.id for m in queued)
                    tracked.owed.update(tracked.pending_at_cancel)
                    tracked.phase_at_cancel = node.agent.phase
                assert perform is not None
                perform(effect)
                if effect.name == "capture":
                    tracked.captured = True

            node.control._perform = snapshot
            parent_tracked = None if parent is None else self._tracked_of(parent)
            oracle = Oracle(node.control.spec)
            recorder = Recorder(node.control, lambda fire: self._note_refusal(oracle, fire))
            tracked = Tracked(node, recorder, oracle, parent_tracked)
            if parent_tracked is not None:
                parent_tracked.children.append(tracked)
            self.tracked.append(tracked)
            self._latest[child_id] = tracked
            return node

        registry._tree.plant = recorded  # type: ignore[method-assign]
        create = registry._tree.create

        def created(child_id: str, session: Session) -> Any:
            handle = create(child_id, session)
            self.created[child_id] = handle.agent
            return handle

        registry._tree.create = registry._door._create = created

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
        natural = any(
            f.event == "dispose"
            and f.kwargs.get("final_state_flushed") is True
            and any(e.name == "close_inbox" for e in f.effects)
            for root in tracked.recorder.roots
            for f in root.walk()
        )
        if natural and (tracked.pending_at_cancel or tracked.phase_at_cancel != "maintenance"):
            # The natural end: the watcher's verdict was ready, in maintenance (only an idle
            # agent grants it), with nothing queued.
            self.problems.append(
                f"{node.id} ended naturally in phase {tracked.phase_at_cancel} "
                f"with {list(tracked.pending_at_cancel)} queued"
            )
        # Its close shut its agent's waking: what was queued at its cancel, and what was sent
        # straight to it after the close began, is parked for the capture, whatever the agent
        # was doing (a user's clearing cancel since discarded it: then it is not owed).
        captured = node.terminal.pending if node.terminal is not None else ()
        lost = tracked.owed - set(captured)
        if lost:
            self.problems.append(
                f"{node.id}'s capture {list(captured)} lost {sorted(lost)} "
                f"(its agent was {tracked.phase_at_cancel} at its teardown's cancel)"
            )
        # A parent that is itself tearing down still gets the notice (without a wake-up);
        # only a disposed one has nobody left to tell.
        if node.parent_agent.phase != "disposed":
            self.expected_notices[node.id] += 1
        if self.notices[node.id] != self.expected_notices[node.id]:
            self.problems.append(
                f"{node.id} settled with {self.notices[node.id]} notices sent, "
                f"{self.expected_notices[node.id]} expected"
            )

    def _on_turn(self, event: Any) -> None:
        agent = event.agent
        closed = self.closed_agents.get(agent)
        if closed is not None:
            # Seed 004: disposal never latches, so teardown waits on no model turn. From its
            # close on, the agent's waking is shut: nothing sent to it, before or after,
            # starts a turn (agent.toml shut).
            self.problems.append(
                f"{agent.id} started a turn after its activation's close began "
                f"({closed.node.stage}, {closed.phase_at_cancel or 'before its cancel'})"
            )
        if agent in self.stopped:
            self.problems.append(f"{agent.id} started a turn after a user's cancel stopped it")

    def _on_inserted(self, event: MessageInserted) -> None:
        found = _NOTICE.match(event.message.id)
        agent = event.agent
        if found:
            self.notices[found.group(1)] += 1
            child = self._latest.get(found.group(1))
            if child is not None and self.registry._resident.get(child.id) is child.node:
                self.problems.append(f"{child.id}'s notice came before it left the registry")
            if agent.phase not in ("disposing", "disposed") and not agent.table_state["shut"]:
                self.awaiting_turn.setdefault(agent, set()).add(event.message.id)
        self.stopped.discard(agent)  # a message arrived: a turn may follow

    def _on_cancel_requested(self, event: Any) -> None:
        agent = event.agent
        self.cancels.append(agent)
        self.awaiting_turn.pop(agent, None)  # the cancel clears or parks what it did not take
        how = self.at_cancel.pop(agent, None)
        if how is not None:
            tracked = next((t for t in self.tracked if t.node.agent is agent), None)
            if tracked is not None:
                # Inside the cancel's notification: the teardown's (its close shut the agent
                # just before), a drain's, the natural end's in maintenance, or a user's.
                self._send_straight(tracked, how)

    def _send_straight(self, tracked: Tracked, how: str) -> None:
        """Send to ``tracked``'s agent directly (``act.agent.followup``, ``send``,
        ``inject``, ``steer``), not through the registry; whatever its activation's stage."""
        agent = tracked.node.agent
        self.counter += 1
        message = UserMessage(f"d{self.counter}", how)
        owed = tracked.closed and not tracked.captured
        try:
            if how == "followup":
                agent.followup(message)
            elif how == "steer":
                agent.steer(message)
            elif how == "inject":
                agent.inject(message)
            else:
                agent.send(message, "next_turn", wakeup=how == "wake")
        except Rejected as refused:
            if agent.phase != "disposed" or not tracked.captured:
                self.problems.append(f"{agent.id} ({agent.phase}) refused {how}: {refused}")
            return
        if owed:
            tracked.owed.add(message.id)

    def _run(self, action: Callable[[], object]) -> None:
        self.bridge.run(action)

    def _spawn(
        self, make: Callable[[], Coroutine[Any, Any, None]], name: str, settle: bool = True
    ) -> None:
        """Run ``make()`` as a task of the loop; with ``settle``, start it inside a step of
        its own and let the loop settle, else only create it (inside a rule's action: it runs
        when the loop next turns, after the tasks the action's calls began)."""

        async def run() -> None:
            await make()

        def start() -> None:
            task = self.bridge.loop.create_task(run(), name=name)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        if settle:
            self._run(start)
        else:
            start()

    def _teardown_call(
        self, tracked: Tracked | None, make: Callable[[], Any], covered: Sequence[Tracked] = ()
    ) -> None:
        """Start a teardown entry inside the rule (it begins in the call), await it in a task.
        ``covered``: for a drain, the activations it tears down (their failures it raises)."""
        self._run(self._teardown_begin(tracked, make, covered))

    def _teardown_begin(
        self, tracked: Tracked | None, make: Callable[[], Any], covered: Sequence[Tracked] = ()
    ) -> Callable[[], None]:
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
                    named = {f.activation for f in error.failures}
                except Exception as error:
                    self.problems.append(f"a teardown call raised {error!r}")
                    return
                else:
                    self.outcomes.append((tracked, None))
                    named = set()
                self.hidden += [t.id for t in covered if t.own_failed and t.id not in named]

            task = self.bridge.loop.create_task(wait(), name="teardown call")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        return begin

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

    @initialize(
        depth=st.integers(min_value=0, max_value=3),
        failing=st.sampled_from(("none", "sibling", "deepest", "root")),
        idle_root=st.booleans(),
        at_idle=st.sampled_from(("nothing", "followup", "queued")),
        queued=st.booleans(),
    )
    def grow(self, depth: int, failing: str, idle_root: bool, at_idle: str, queued: bool) -> None:
        """Begin with a tree below the host: a chain of ``depth`` generations and, from two
        on, a sibling of the second; one activation's session failing its flushes (the
        sibling's teardown then fails while its elder's still waits for its own child); the
        root done with its own work (idle, waiting for its children), with ``at_idle`` a
        message landing before its watcher runs (as :meth:`interrupt_idle`), and a message
        queued for it without waking it. So most programs tear down trees, not lone roots."""
        grown: list[Tracked] = []
        agent = self.host
        for _ in range(depth):
            self._start(agent)
            grown.append(self._latest[f"a{self.counter}"])
            agent = grown[-1].node.agent
        sibling = None
        if depth >= 2:
            self._start(grown[0].node.agent)
            sibling = self._latest[f"a{self.counter}"]
        chosen = {"sibling": sibling, "deepest": grown[-1] if grown else None}.get(
            failing, grown[0] if grown and failing == "root" else None
        )
        if chosen is not None:
            self.sessions[chosen.id].fail()
        if grown and idle_root:
            if at_idle != "nothing":
                self.armed[grown[0].node.agent] = at_idle == "queued"
            self._answer(grown[0].id)
            if queued:
                message = UserMessage(f"q{self.counter}", "later")
                agent = grown[0].node.agent

                def send() -> None:
                    with contextlib.suppress(Rejected):  # a root without children has ended
                        agent.send(message, "next_turn", wakeup=False)

                self._run(send)

    @rule(pick=picks, under_host=st.booleans(), siblings=st.integers(min_value=1, max_value=2))
    def start(self, pick: int, under_host: bool, siblings: int) -> None:
        """Start one child, or two siblings at once, under the host or a live activation."""
        parent = self._pick(pick)
        agent = self.host if under_host or parent is None else parent.node.agent
        for _ in range(siblings):
            self._start(agent)

    @precondition(lambda self: bool(self._running_spawns()))
    @rule(pick=picks)
    def start_below_spawned(self, pick: int) -> None:
        """Start a continuable child below a running spawned child: a host-owned parent that
        is disposed when its spawn call returns, its roots with it (parent_disposing)."""
        running = self._running_spawns()
        self._start(running[pick % len(running)])

    def _start(self, agent: Agent, settle: bool = True) -> None:
        self.counter += 1
        child_id = f"a{self.counter}"
        session = HeldSession()
        self.sessions[child_id] = session

        async def start() -> None:
            what = f"start {child_id} below {agent.id}"
            closed = self._admission_closed(agent)
            self.last_refused = None
            try:
                await self.registry.start(agent, child_id, "work", session=session.session)
            except SubagentError as refused:
                self._refused(what, refused)
                if closed is None:
                    self.problems.append(
                        f"{what} was refused {refused.code} ({refused}), though its parent is "
                        "live and no drain covers it"
                    )
            except UsageError as refused:
                self.problems.append(f"{what}: {refused}")
            else:
                if closed is not None:
                    self.problems.append(f"{what} was admitted, but {closed}")

        self._spawn(start, f"start {child_id}", settle)

    def _activation_of(self, agent: Agent) -> Tracked | None:
        """The activation whose agent ``agent`` is, if it is one's (not host-owned)."""
        return next((t for t in self.tracked if t.node.agent is agent), None)

    def _admission_closed(self, agent: Agent) -> str | None:
        """Why a start below ``agent`` must be refused now (the code is the table's), or
        None: its parent is live and no drain the program ran covers it, so it is admitted."""
        if self.drained:
            return "drain() closed admission"
        if agent in self.drained_below:
            return f"a drain_descendants named {agent.id}"
        if agent.phase in ("disposing", "disposed"):
            return f"{agent.id} is {agent.phase}"
        tracked = self._activation_of(agent)
        if tracked is not None and tracked.node.stage != "active":
            return f"{agent.id}'s activation is {tracked.node.stage}"
        return None

    def _refused(self, what: str, error: SubagentError) -> None:
        """A caller was refused ``error``: it follows the table's refusal it reports, whose
        code the oracle's replay gives (checked in :meth:`the_registry_runs_the_table`)."""
        if self.last_refused is None:
            self.problems.append(f"{what} was refused {error.code} with no table refusing it")
            return
        oracle, fire = self.last_refused
        self.refusals.append((what, error, oracle, fire))

    def _note_refusal(self, oracle: Oracle, fire: Fire) -> None:
        self.last_refused = (oracle, fire)

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks)
    def followup(self, pick: int) -> None:
        self.counter += 1
        self._deliver(self._any(pick).id, UserMessage(f"m{self.counter}", "more"))

    def _delivery(self, child_id: str) -> str | None:
        """What ``rt.subagents.followup(child_id, ...)`` must do now: ``delivered`` (to the
        resident active activation), ``resumed`` (cold: the child settled below a live parent
        that admits), ``refused`` (a SubagentError, with the table's code), ``lost`` (refused
        or unknown: its parent is disposing or gone), or None when either may happen (it
        awaits a natural end's teardown, then resumes cold if it may then)."""
        node = self._latest[child_id].node
        if node.stage == "active":
            return "delivered"
        if node.stage != "settled":
            return None if node.value("natural") and not self.drained else "refused"
        parent = node.parent_agent
        if parent.phase in ("disposing", "disposed"):
            return "lost"
        return "refused" if self._admission_closed(parent) else "resumed"

    def _deliver(self, child_id: str, message: UserMessage, settle: bool = True) -> None:
        async def deliver() -> None:
            what = f"followup {child_id}"
            before = self._latest[child_id]
            expected = self._delivery(child_id)
            self.last_refused = None
            try:
                act = await self.registry.followup(child_id, message)
            except SubagentError as refused:
                self._refused(what, refused)
                if expected in ("delivered", "resumed"):
                    self.problems.append(f"{what} was refused {refused.code}, not {expected}")
            except UsageError as refused:
                if expected != "lost":
                    self.problems.append(f"{what}: {refused}, not {expected}")
            else:
                latest = self._latest[child_id]
                if expected in ("refused", "lost"):
                    self.problems.append(f"{what} was taken ({act.stage}), not {expected}")
                elif expected == "delivered" and act is not before.node.public:
                    self.problems.append(f"{what} went to another activation than the active one")
                elif expected == "resumed" and (
                    latest is before
                    or act is not latest.node.public
                    or latest.node.parent_agent is not before.node.parent_agent
                ):
                    self.problems.append(f"{what} was not resumed cold below its parent")

        self._spawn(deliver, f"followup {child_id}", settle)

    @rule(
        pick=picks,
        parent=st.sampled_from(("host", "activation", "spawned")),
        fork=st.booleans(),
        hold=st.booleans(),
    )
    def spawn(self, pick: int, parent: str, fork: bool, hold: bool) -> None:
        """Ask a parent (the host, a live activation, or a running spawned child) to spawn or
        fork a child from its delegate tool, in its current or next turn; with ``hold``, the
        tool waits for a rule to answer it before it calls spawn."""
        self.counter += 1
        child_id = f"s{self.counter}"
        if hold:
            self.held_tools.add(child_id)
        message = UserMessage(f"m{self.counter}", f"{'fork' if fork else 'spawn'} {child_id}")
        live = self._live() if parent == "activation" else []
        running = self._running_spawns() if parent == "spawned" else []
        if live:
            # Deliver, then answer the parent's held request, so its next turn spawns now.
            target = live[pick % len(live)].id
            self._deliver(target, message)
            self._answer(target)
        elif running:
            self._run(lambda: running[pick % len(running)].followup(message))
        else:
            self._run(lambda: self.host.followup(message))

    def _answer(self, activation: str) -> None:
        """Answer the held model request of ``activation``'s agent, if it has one."""
        for gate in [g for g in self.held if g.name == f"model {activation}"]:
            self._run(gate.open)

    def _running_spawns(self) -> list[Agent]:
        """The spawned children not yet disposed, whose spawn call has not returned."""
        agents = [self.created.get(s.id) for s in self.spawns.values() if not s.done]
        return [a for a in agents if a is not None and a.phase not in ("disposing", "disposed")]

    def _open_spawns(self) -> list[Spawn]:
        return [s for s in self.spawns.values() if not s.done and not s.draining]

    @precondition(lambda self: bool(self._open_spawns()))
    @rule(pick=picks, child=st.booleans())
    def cancel_during_spawn(self, pick: int, child: bool) -> None:
        """Cancel the parent of a running spawn (its turn aborts: the child sees ``parent``),
        or the spawned child itself (reason user: its parent's tool gets its answer)."""
        spawn = self._open_spawns()[pick % len(self._open_spawns())]
        agent = self.created.get(spawn.id) if child else spawn.before
        if agent is None or agent.phase in ("disposing", "disposed"):
            return
        if child:
            spawn.cancelled_directly = True
        self._user_cancel(agent)

    @precondition(
        lambda self: any(s.parent_id in self.registry.resident for s in self._open_spawns())
    )
    @rule(pick=picks)
    def dispose_during_spawn(self, pick: int) -> None:
        """Dispose the activation whose agent's tool runs a spawn: its teardown cancels the
        turn with ``parent``, which cancels the child, and waits for both."""
        resident = self.registry.resident
        parents = [
            self._latest[s.parent_id] for s in self._open_spawns() if s.parent_id in resident
        ]
        tracked = [t for t in parents if t.node.stage == "active"] or parents
        chosen = tracked[pick % len(tracked)]
        self._teardown_call(chosen, lambda: self.registry.dispose(chosen.node.public))

    @precondition(lambda self: bool(self._live()))
    @rule(pick=picks)
    def send_quietly(self, pick: int) -> None:
        """Queue a message for a live activation's next turn without waking it: its watcher
        must wait for it, not end the activation."""
        tracked = self._pick(pick)
        assert tracked is not None
        self.counter += 1
        message = UserMessage(f"m{self.counter}", "later")
        agent = tracked.node.agent

        def send() -> None:
            with contextlib.suppress(Rejected):
                agent.send(message, "next_turn", wakeup=False)

        self._run(send)

    @precondition(lambda self: bool(self._live()))
    @rule(pick=picks, quiet=st.booleans())
    def interrupt_idle(self, pick: int, quiet: bool) -> None:
        """Answer a live activation's request; when its agent next publishes idle, a message
        lands before its watcher runs: a followup (the watcher finds it busy again) or, if
        ``quiet``, one queued without waking it (the watcher finds pending work)."""
        tracked = self._pick(pick)
        assert tracked is not None
        self.armed[tracked.node.agent] = quiet
        self._answer(tracked.id)

    def _on_status(self, event: Any) -> None:
        agent = event.agent
        if event.status == "idle" and agent in self.armed:
            quiet = self.armed.pop(agent)
            self.counter += 1
            message = UserMessage(f"m{self.counter}", "again")
            node = self.registry._resident.get(agent.id)

            def deliver() -> None:
                # The agent's own send, which (unlike the registry's followup) nothing refuses
                # once the activation is torn down: only while it is active.
                if node is not None and node.agent is agent and node.stage == "active":
                    with contextlib.suppress(Rejected):
                        agent.send(message, "next_turn", wakeup=not quiet)

            self.bridge.loop.call_soon(deliver)

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks)
    def cancel(self, pick: int) -> None:
        tracked = self._any(pick)
        if tracked.node.agent.phase not in ("disposing", "disposed"):
            self._user_cancel(tracked.node.agent)

    def _user_cancel(self, agent: Agent, keep_inbox: bool = False) -> None:
        self._run(lambda: self._cancel_now(agent, keep_inbox))

    def _cancel_now(self, agent: Agent, keep_inbox: bool) -> None:
        """``agent.cancel()`` (USER): unless ``keep_inbox``, it clears the inbox, so a
        teardown already under way has nothing queued left to capture. Afterwards the agent
        is stopped: its next turn needs a message to arrive first (a wake the cancel left
        latched, as a keep_inbox cancel during maintenance may, replays)."""
        tracked = [t for t in self.tracked if t.node.agent is agent]
        if not keep_inbox and agent.inbox.pending:
            for each in tracked:
                each.cleared = True
        agent.cancel(keep_inbox=keep_inbox)
        if not keep_inbox:  # discarded inside the call, a cancel listener's sends included
            for each in tracked:
                each.pending_at_cancel = ()
                each.owed.clear()
        if agent.phase not in ("disposing", "disposed") and not agent.table_state["latch"]:
            self.stopped.add(agent)

    def _parents(self) -> list[Agent]:
        """The host and the live activations' agents that have a running continuable child."""
        live = self._live()
        agents = [self.host, *(t.node.agent for t in live)]
        return [a for a in agents if any(t.node.parent_agent is a for t in live)]

    @precondition(lambda self: bool(self._parents()))
    @rule(pick=picks, keep_inbox=st.booleans(), answer=st.booleans())
    def cancel_parent(self, pick: int, keep_inbox: bool, answer: bool) -> None:
        """A user cancels a parent agent (the host, or an activation's agent) while its
        children and grandchildren run, as ``parent.cancel()`` or with ``keep_inbox``.

        The original runtime's behaviour, which fsm_core keeps: a parent's cancel is local to
        its own agent. No continuable descendant's agent is cancelled and no teardown begins
        in the call, every one keeps its stage, phase and turns once the loop settled; with
        ``keep_inbox`` nothing queued for the parent is discarded. The parent is stopped: its
        next turn needs a message to arrive (:meth:`_on_turn`), and a child's settlement
        notice is one: it wakes the parent into a turn that claims it
        (:meth:`a_notice_wakes_its_parent`). With ``answer``, a direct child's held
        request is answered afterwards, so it ends its work and its notice arrives now."""
        parents = self._parents()
        parent = parents[pick % len(parents)]
        below = [t for t in self._live() if self._below(t, parent)]
        before = {t: self._activity(t) for t in below}
        mark = len(self.cancels)
        closes = sum(t.closed for t in self.tracked)

        def cancel() -> None:
            queued = [m.id for m in (*parent.inbox.next_step, *parent.inbox.next_turn)]
            self._cancel_now(parent, keep_inbox)
            reached = [
                a.id for a in self.cancels[mark:] if a is not parent and self._activation_of(a)
            ]
            if reached:
                self.problems.append(f"{parent.id}'s cancel cancelled the agents of {reached}")
            if sum(t.closed for t in self.tracked) != closes:
                self.problems.append(f"{parent.id}'s cancel began a teardown")
            if keep_inbox:
                kept = {m.id for m in (*parent.inbox.next_step, *parent.inbox.next_turn)}
                if not set(queued) <= kept:
                    self.problems.append(
                        f"{parent.id}'s keep_inbox cancel discarded {set(queued) - kept}"
                    )

        self._run(cancel)
        for t, then in before.items():
            now = self._activity(t)
            if now != then:
                self.problems.append(
                    f"{t.id} below {parent.id} changed with its parent's cancel: {then} -> {now}"
                )
        if answer:
            children = [t for t in below if t.node.parent_agent is parent]
            self._answer(children[pick % len(children)].id)

    def _activity(self, tracked: Tracked) -> tuple[str, str, int]:
        """What a user sees of an activation's work: its stage, its agent's phase, its turns."""
        agent = tracked.node.agent
        turns = sum(1 for e in agent.session.events if e.type == "turn/start")
        return tracked.node.stage, agent.phase, turns

    @precondition(lambda self: any(t.node.stage != "settled" for t in self.tracked))
    @rule(
        pick=picks,
        how=st.sampled_from(_SENDS),
        when=st.sampled_from(("now", "closing", "at_cancel")),
    )
    def send_straight(self, pick: int, how: str, when: str) -> None:
        """Send straight to an activation's agent, bypassing the registry
        (``act.agent.followup``, ``steer``, ``inject``, ``send`` waking or not), at any
        moment: ``now``, whatever its stage (active, closing, settled: its agent refuses then);
        ``closing``: in the same call that began its teardown (a dispose), before anything
        awaited; ``at_cancel``: from a listener inside its agent's next cancel notification
        (its teardown's, under a drain, a dispose or the natural end in maintenance, or a
        user's). Once its close began, no request and no turn may follow
        (:meth:`_on_turn`, ``_Model``), and the message is in its capture
        (:meth:`_on_settled`)."""
        open_ = [t for t in self.tracked if t.node.stage != "settled"]
        tracked = open_[pick % len(open_)]
        if when == "at_cancel":
            self.at_cancel[tracked.node.agent] = how
            return
        if when == "now":
            self._run(lambda: self._send_straight(tracked, how))
            return
        begin = self._teardown_begin(tracked, lambda: self.registry.dispose(tracked.node.public))

        def dispose_then_send() -> None:
            begin()
            self._send_straight(tracked, how)

        self._run(dispose_then_send)

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks)
    def dispose(self, pick: int) -> None:
        """Dispose an activation not yet settled (any, once all settled)."""
        open_ = [t for t in self.tracked if t.node.stage != "settled"] or self.tracked
        tracked = open_[pick % len(open_)]
        self._teardown_call(tracked, lambda: self.registry.dispose(tracked.node.public))

    @precondition(lambda self: bool(self._live()))
    @rule(pick=picks)
    def race_teardowns(self, pick: int) -> None:
        """Four callers tear one activation down in the same loop step: dispose twice, its
        parent's drain_children and drain_descendants. One teardown runs; all four await it."""
        tracked = self._pick(pick)
        assert tracked is not None
        node, registry = tracked.node, self.registry
        parent = node.parent_agent
        begins = [
            self._teardown_begin(tracked, lambda: registry.dispose(node.public)),
            self._teardown_begin(tracked, lambda: registry.dispose(node.public)),
            self._teardown_begin(None, lambda: registry.drain_children(parent, [node.id])),
            self._teardown_begin(None, lambda: self._drain_below([parent])),
        ]

        def race() -> None:
            for begin in begins:
                with contextlib.suppress(SubagentError):  # a parent already gone: UNAUTHORIZED
                    begin()

        self._run(race)

    @precondition(lambda self: bool(self._live()))
    @rule()
    def drain(self) -> None:
        """Drain the registry (only once something is live: it ends admission for good)."""
        self.drained = True
        covered = [t for t in self.tracked if t.node.stage != "settled"]
        self._teardown_call(None, self.registry.drain, covered)

    @rule(pick=picks, host=st.booleans())
    def drain_descendants(self, pick: int, host: bool) -> None:
        parent = self._pick(pick)
        agent = self.host if host or parent is None else parent.node.agent
        covered = [t for t in self.tracked if t.node.stage != "settled" and self._below(t, agent)]
        self._teardown_call(None, lambda: self._drain_below([agent]), covered)

    @precondition(lambda self: bool(self._live()) or bool(self._running_spawns()))
    @rule(picks=st.lists(picks, min_size=2, max_size=3))
    def drain_several(self, picks: list[int]) -> None:
        """drain_descendants naming several parents at once: the host, live activations'
        agents and running spawned children, as picked (the same one twice too)."""
        candidates = [self.host, *(t.node.agent for t in self._live()), *self._running_spawns()]
        agents = [candidates[p % len(candidates)] for p in picks]
        covered = [
            t
            for t in self.tracked
            if t.node.stage != "settled" and any(self._below(t, a) for a in agents)
        ]
        self._teardown_call(None, lambda: self._drain_below(agents), covered)

    def _drain_below(self, agents: list[Agent]) -> Any:
        """``drain_descendants(agents)``; unless it refused them, admission below each stays
        closed for good."""
        drained = self.registry.drain_descendants(agents)
        self.drained_below.update(agents)
        return drained

    def _below(self, tracked: Tracked, agent: Agent) -> bool:
        """Whether ``agent`` is an ancestor of ``tracked``'s activation."""
        node: _Node | None = tracked.node
        while node is not None:
            if node.parent_agent is agent:
                return True
            node = node.parent
        return False

    @precondition(lambda self: bool(self.tracked))
    @rule(pick=picks, other=picks, wrong_parent=st.booleans())
    def drain_children(self, pick: int, other: int, wrong_parent: bool) -> None:
        tracked = self._any(pick)
        named = [tracked.id, self._any(other).id]
        parent = tracked.node.parent_agent
        if wrong_parent:
            parent = self.host if parent is not self.host else tracked.node.agent

        resident = [self.registry._resident[i] for i in named if i in self.registry._resident]
        # One already torn down is past any drain: the table ignores it, lineage or not.
        strangers = [n.id for n in resident if n.parent_agent is not parent and n.stage == "active"]

        def drain() -> Any:
            try:
                drained = self.registry.drain_children(parent, named)
            except SubagentError as refused:
                if refused.code != "UNAUTHORIZED":
                    raise
                if not wrong_parent and parent.phase not in ("disposing", "disposed"):
                    owners = [self.registry.owner(i) for i in named if i in self.registry.resident]
                    if all(o == parent.id for o in owners):
                        self.problems.append(f"drain_children refused its own children: {refused}")
                raise
            if strangers:
                self.problems.append(f"{parent.id} drained {strangers}, not its children")
            return drained

        self._teardown_call(None, drain)

    @precondition(lambda self: bool(self._live()))
    @rule(
        kind=st.sampled_from(("drain", "descendants", "children")),
        pick=picks,
        when=st.sampled_from(("closing", "after", "settled")),
        moves=st.lists(st.tuples(st.sampled_from(("followup", "start")), picks), max_size=3),
    )
    def drain_then(self, kind: str, pick: int, when: str, moves: list[tuple[str, int]]) -> None:
        """A drain of each kind, then followups to the activations it drained and starts
        below their parent: ``closing``, in the same call (the drained activations are still
        closing when they run); ``after`` the loop settled; ``settled``, once every gate was
        opened too, so the drained activations settled.

        What each must do is the tables' to say (:meth:`_delivery`,
        :meth:`_admission_closed`): a drain() refuses everything; a drain_descendants([p])
        refuses every start below p and every followup to what it drained; a
        drain_children(p, ids) closes nothing: a followup to a settled drained child resumes
        it cold, and p admits new children. A refusal's code is the table row's
        (:meth:`_refused`), whichever code the tables give a drained scope."""
        live = self._live()
        tracked = live[pick % len(live)]
        parent = tracked.node.parent_agent
        if kind == "drain":
            self.drained = True
            covered = [t for t in self.tracked if t.node.stage != "settled"]
            targets = [t.id for t in self.tracked]

            def make() -> Any:
                return self.registry.drain()
        elif kind == "descendants":
            parents = [self.host, *(t.node.agent for t in live)]
            parent = parents[pick % len(parents)]
            covered = [
                t for t in self.tracked if t.node.stage != "settled" and self._below(t, parent)
            ]
            targets = [t.id for t in self.tracked if self._below(t, parent)]
            agents = [parent]

            def make() -> Any:
                return self._drain_below(agents)
        else:
            siblings = [t for t in self.tracked if t.node.parent_agent is parent]
            named = [t.id for t in siblings if t.node.stage != "settled"][:2] or [tracked.id]
            covered = [t for t in siblings if t.id in named and t.node.stage != "settled"]
            targets = named
            chosen = parent

            def make() -> Any:
                return self.registry.drain_children(chosen, named)

        begin = self._teardown_begin(None, make, covered)
        below = parent

        def follow() -> None:
            for verb, k in moves:
                if verb == "followup" and targets:
                    self.counter += 1
                    message = UserMessage(f"m{self.counter}", "after the drain")
                    self._deliver(targets[k % len(targets)], message, settle=False)
                else:
                    self._start(below, settle=False)

        if when == "closing":

            def both() -> None:
                begin()
                follow()

            self._run(both)
            return
        self._run(begin)
        if when == "settled":
            while self._release(covered):
                self.bridge.settle()
        self._run(follow)

    def _release(self, covered: Sequence[Tracked]) -> bool:
        """Open what holds the teardown of ``covered`` and their subtrees (their sessions'
        flushes, their agents' held tools), and nothing else; whether anything was opened."""
        ids = {d.id for t in covered for d in self._subtree_of(t)}
        tools = {f"tool {s.id}" for s in self.spawns.values() if s.parent_id in ids}
        gates = [self.sessions[i].gate for i in ids] + [g for g in self.held if g.name in tools]
        opened = [g for g in gates if g is not None and not g.is_open]
        for gate in opened:
            gate.open()
        return bool(opened)

    def _subtree_of(self, tracked: Tracked) -> list[Tracked]:
        return [t for t in self.tracked if t is tracked or self._below(t, tracked.node.agent)]

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
        self.door_oracle.follow(self.door.roots)
        if not self.door.busy:
            assert self.door_oracle.state == self.registry._door.control.snapshot(), "the door"
        assert not self.door.problems, self.door.problems
        for tracked in self.tracked:
            tracked.oracle.follow(tracked.recorder.roots)
            if not tracked.recorder.busy:
                assert tracked.oracle.state == tracked.node.control.snapshot(), tracked.id
        problems = [p for t in self.tracked for p in t.recorder.problems]
        assert not problems, problems
        for check in [*self.refusals]:
            what, error, oracle, fire = check
            text = oracle.refusals.get(fire)
            if text is None:
                continue  # replayed at a later step
            self.refusals.remove(check)
            code = text.partition(": ")[0]
            assert error.code == code, (
                f"{what} was refused {error.code}; the table's row for {fire} says {text!r}"
            )

    @invariant()
    def the_ledger_is_the_tables(self) -> None:
        registry = self.registry
        for tracked in self.tracked:
            node = tracked.node
            current = self._latest[node.id] is tracked
            resident = registry._resident.get(node.id) is node
            assert resident == node.value("resident"), (node.id, resident)
            if current:
                assert (node.id in registry._ledger.slots) == node.value("slot"), node.id
                assert (node.id in registry._ledger.owners) == node.value("owned"), node.id
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
        assert not self.hidden, f"a drain's error did not name the failing {self.hidden}"
        for disposed, error in self.outcomes:
            if disposed is not None and not isinstance(error, SubagentError):
                first = self.dispose_results.setdefault(disposed, error)
                assert first is error, f"two disposes of {disposed.id}: {first!r} and {error!r}"
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
    def a_finished_activation_ends(self) -> None:
        """An active activation whose agent is idle, owns no child and has nothing queued has
        ended its work: its watcher's verdict was ready, so it is torn down by now."""
        for tracked in self._live():
            agent = tracked.node.agent
            done = agent.phase == "idle" and not tracked.node.owned and not agent.inbox.pending
            if done and not tracked.cleared:
                raise AssertionError(f"{tracked.id} finished its work but did not end")

    @invariant()
    def a_notice_wakes_its_parent(self) -> None:
        """A child's settlement notice wakes its live parent agent into a turn that claims
        it, a parent a user's cancel stopped included (the cancel was local to the parent's
        own agent): an idle parent, not shut, with no driver scheduled, has claimed every
        notice that reached it since its last cancel."""
        for agent, notices in list(self.awaiting_turn.items()):
            if agent.phase in ("disposing", "disposed") or agent.table_state["shut"]:
                del self.awaiting_turn[agent]  # parked for its capture, or for nobody
                continue
            notices -= {str(e.data["id"]) for e in agent.session.events if e.type == "user/message"}
            if not notices:
                del self.awaiting_turn[agent]
            elif agent.phase == "idle" and not agent.table_state["scheduled"]:
                raise AssertionError(f"{agent.id} is idle and never took {sorted(notices)}")

    @invariant()
    def nothing_leaks(self) -> None:
        registry = self.registry
        live = {t.id for t in self.tracked if t.node.stage != "settled"}
        assert set(registry._ledger.slots) <= live, (
            f"slots of settled activations: {registry._ledger.slots}"
        )
        watched = {t.get_name().removeprefix("watch ") for t in registry._watcher.tasks}
        assert watched <= live, f"watchers of settled activations: {watched - live}"
        for parent, roots in registry._ledger.roots.items():
            assert roots, f"an empty entry for host parent {parent.id!r} outlives its last root"
            assert set(roots) <= live, f"settled roots: {roots}"
        if not live:
            assert not registry._ledger.owners and not registry._ledger.slots, registry
        # The cold-resume memory never outgrows the live parents: a host parent's settled
        # children go when it begins disposing, an activation's agent's when it is disposed.
        gone = [
            i
            for i, d in registry._ledger.dormant.items()
            if d.parent_agent.phase == "disposed"
            or (
                d.parent_agent.phase == "disposing"
                and d.parent_agent.id not in registry._ledger.owners
            )
        ]
        assert not gone, f"settled children of disposing or disposed parents are remembered: {gone}"

    @invariant()
    def a_disposing_host_leaves_no_working_root(self) -> None:
        """Seed 004's cancel runs top-down: a root whose host parent began disposing was
        disposed inside that call (its agent cancelled with ``parent``), not left running."""
        for parent, roots in self.registry._ledger.roots.items():
            for root_id in roots:
                node = self.registry._resident[root_id]
                if node.parent_agent.phase in ("disposing", "disposed"):
                    phase = node.parent_agent.phase
                    assert node.stage != "active", (
                        f"root {root_id} runs on below its {phase} parent {parent.id!r}"
                    )

    @invariant()
    def spawns_answer_to_their_parent(self) -> None:
        for spawn in self.spawns.values():
            self._check_spawn(spawn, closing=False)

    def _check_spawn(self, spawn: Spawn, *, closing: bool) -> None:
        """Seed 000's subagent clauses for one spawn or fork. ``closing``: the runtime's
        close disposed everything, so a signal may carry ``disposed``."""
        parent = spawn.before
        assert parent is not None and parent.id == spawn.parent_id, (spawn.id, parent)
        for signal, who in spawn.requests:
            assert who == spawn.id, f"{spawn.id}'s model request ran as {who}"
            if signal.aborted and not closing:
                allowed = (PARENT, USER) if spawn.cancelled_directly else (PARENT,)
                assert signal.reason in allowed, (spawn.id, signal.reason)
        if not spawn.done:
            return
        assert spawn.after is parent, f"after {spawn.id} the tool ran as {spawn.after}"
        if spawn.aborted_first:
            assert not spawn.requests, f"{spawn.id}, spawned under an aborted turn, ran one"
        error = spawn.error
        refused = isinstance(error, SubagentError)  # with the table's code (_refused)
        assert refused == spawn.draining, (spawn.id, error, spawn.draining)
        if not closing:
            assert error is None or refused or isinstance(error, Aborted), (spawn.id, error)
        if spawn.aborted_then and not refused:
            assert isinstance(error, Aborted), f"{spawn.id} returned from an aborted turn"
        if isinstance(error, Aborted):
            assert spawn.aborted_then, f"{spawn.id} raised Aborted in a live turn"
        child = self.created.get(spawn.id)
        if refused:
            assert child is None, f"a refused {spawn.id} created its agent"
        else:
            assert child is not None and child.phase == "disposed", (spawn.id, child)
            assert spawn.id not in self.rt.agents, f"{spawn.id} is still registered"
            by_parent = any(s.aborted and s.reason == PARENT for s, _ in spawn.requests)
            if by_parent:
                # The runtime's close disposes the child too, and disposed wins the outcome.
                ends = {"aborted", "disposed"} if closing else {"aborted"}
                assert ends & set(turn_outcomes(child)), f"{spawn.id}'s turn was not aborted"
        results = [
            (e.data["ok"], e.data["result"])
            for e in parent.session.events
            if e.type == "tool/result" and e.data["id"] == f"call {spawn.id}"
        ]
        if results:
            aborted = isinstance(error, Aborted)
            expected = (
                (True, spawn.text) if error is None else (False, "aborted" if aborted else "failed")
            )
            assert results == [expected], (spawn.id, results, expected)

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
                while not closing.done() and self._open_everything():
                    self.bridge.settle()  # a held tool its turn reached during the close
                assert closing.done(), f"aclose() never returned: {self._describe()}"
                closing.result()
                self.the_registry_runs_the_table()
                leftover = [t for t in self.bridge.pending() if t is not closing]
                assert not leftover, leftover
                registry = self.registry
                assert (
                    not registry._resident
                    and not registry._ledger.slots
                    and not registry._ledger.owners
                )
                assert not registry._watcher.tasks
                assert not self.problems, self.problems
                for spawn in self.spawns.values():
                    assert spawn.done, f"{spawn.id}'s spawn never returned"
                    self._check_spawn(spawn, closing=True)
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
        self.a_notice_wakes_its_parent()
        self.a_finished_activation_ends()
        self.spawns_answer_to_their_parent()

    def __repr__(self) -> str:
        return f"<ActivationRaceMachine {self._describe()}>"
