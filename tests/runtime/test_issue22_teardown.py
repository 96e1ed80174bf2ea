"""Issue 22, the activation registry's teardown (``rt.subagents``): faults 2, 4-10, each
pinned as the behaviour intended, expected to fail (``strict``) until it is fixed.

2. A settlement notice's id never collides with a message its parent already holds.
4. A natural end whose final flush fails is logged as a failure, not a bug, and
   ``subagent/settled`` carries the failure object (``failure``).
5. The notice says whether the child finished, was stopped or failed.
6. An activation's own tool awaiting a teardown that covers it is refused with UsageError.
7. A listener's non-Exception BaseException during a teardown propagates once, and the
   activation still converges.
8. Cancelling the top of a 150-generation spawn chain cancels every generation.
9. A bad child id or id collection is a UsageError naming it, not a bare TypeError.
10. A failed teardown nobody awaits leaves asyncio nothing to warn about.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import suppress
from typing import Any

import pytest

from fsm_core import UsageError
from fsm_core.runtime import (
    AbortSignal,
    Activation,
    ActivationSettled,
    ActivationTeardownFailed,
    Agent,
    DisposalStarted,
    MessageInserted,
    Reply,
    Runtime,
    Session,
    SessionError,
    SubagentSpec,
    ToolCall,
    TurnEnded,
    UserMessage,
)
from fsm_core.testing import Gate, Wait
from tests.idle_loop import IdleLoop
from tests.runtime.issue22_support import GUARD, bounded, drive, no_thread_left, returns
from tests.runtime.subagent_support import Models, Settlements

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    with no_thread_left():
        yield


class Interrupt(BaseException):
    """Like ``KeyboardInterrupt``, a BaseException that is no Exception, but one asyncio does
    not re-raise out of the event loop (a real one would end the test run)."""


async def close_quietly(rt: Runtime) -> None:
    """Best-effort cleanup once a test's own assertions are decided: whatever today's faults
    make ``aclose()`` raise, it is not what the test is about."""
    with suppress(BaseException):
        await bounded(rt.aclose(), GUARD)


async def runtime(*tools: Any) -> tuple[Runtime, Models, Agent]:
    models = Models()
    rt = Runtime(models, tools)
    return rt, models, (await rt.create_agent("host")).agent


def failing_at(stages: tuple[str, ...], error: SessionError) -> tuple[Session, list[Activation]]:
    """A session whose writer raises ``error`` while its activation (the one appended to the
    returned list once started) is at one of ``stages``."""
    owner: list[Activation] = []

    async def write(_log: str) -> None:
        if owner and owner[0].stage in stages:
            raise error

    return Session(writer=write), owner


def notices_to(rt: Runtime, parent: str) -> list[UserMessage]:
    """Every message inserted into the inbox of the agent ``parent``, in order."""
    seen: list[UserMessage] = []

    def inserted(event: MessageInserted) -> None:
        if event.agent.id == parent:
            seen.append(event.message)

    rt.events.on("inbox/inserted", inserted)
    return seen


# --- fault 2: a notice's id never collides with a message the parent holds --------------------


@pytest.mark.parametrize("parent", ["activation", "host"])
def test_a_settlement_notice_never_collides_with_a_message_the_parent_holds(parent: str) -> None:
    """The parent holds a pending message ``c:settled:1`` (the id today's first notice
    takes) when its child ``c`` ends: the child's teardown completes (``subagent/settled``,
    its id released) and the parent gets the notice under an id of its own, next to the
    user's message."""

    async def main(loop: IdleLoop) -> None:
        rt, models, host = await runtime()
        settled = Settlements(rt)
        gate = Gate("p")
        try:
            if parent == "activation":  # p stays in its turn: both messages stay queued
                models.script("p", Wait(gate, Reply("p done"), cooperate=False))
                p = await rt.subagents.start(host, "p", "work")
                await gate.reached.wait()
                owner = p.agent
                await rt.subagents.followup("p", UserMessage("c:settled:1", "mine"))
            else:  # the host holds it unwoken; the notice wakes it
                owner = host
                host.inject(UserMessage("c:settled:1", "mine"))
            received = notices_to(rt, owner.id)
            c = await rt.subagents.start(owner, "c", "work")
            await bounded(settled.of("c"))  # the natural end
            await bounded(rt.subagents.dispose(c))  # the same, settled teardown
            assert c.stage == "settled" and not rt.subagents.holds("c")
        finally:
            gate.open()
            await close_quietly(rt)
        ids = [m.id for m in received]
        assert len(received) == 1 and received[0].text.startswith("subagent c")
        assert received[0].id != "c:settled:1", f"the notice took the held message's id: {ids}"

    drive(main)


# --- fault 4: a natural end's failed flush is a failure, and the settlement carries it ---------


def _natural_end_failing(
    rt: Runtime, host: Agent, error: SessionError
) -> Callable[[], Awaitable[Activation]]:
    """Start ``c`` whose turn completes and whose teardown's flush (the handle's: a natural
    end does not flush the final state twice) raises ``error``."""

    async def start() -> Activation:
        session, owner = failing_at(("flushing", "releasing"), error)
        act = await rt.subagents.start(host, "c", "work", session=session)
        owner.append(act)
        return act

    return start


def test_a_natural_end_whose_flush_fails_is_logged_as_a_failure_not_a_bug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fsm_core.runtime")

    async def main(loop: IdleLoop) -> None:
        rt, _models, host = await runtime()
        settled = Settlements(rt)
        disk = SessionError("disk", "", "cannot write the log: full")
        act = await _natural_end_failing(rt, host, disk)()
        await bounded(settled.of("c"))
        assert act.failed is True
        await bounded(rt.aclose(), GUARD)

    drive(main)
    records = [r for r in caplog.records if r.name.startswith("fsm_core")]
    bugs = [r.getMessage() for r in records if "bug" in r.getMessage()]
    assert not bugs, f"an ordinary failure logged as a bug: {bugs}"
    told = [
        r
        for r in records
        if r.levelno >= logging.WARNING
        and (
            (r.exc_info is not None and isinstance(r.exc_info[1], Exception))
            or "'c'" in r.getMessage()
            or " c " in r.getMessage()
        )
    ]
    assert told, "the natural end's failed teardown is logged as a failure"


def test_the_settlement_carries_the_failure_object() -> None:
    """``ActivationSettled.failure``: the ActivationTeardownFailed (or the boundary's
    exception) of a failed teardown, None for one that succeeded."""
    missing = object()

    async def main(loop: IdleLoop) -> None:
        rt, _models, host = await runtime()
        settled = Settlements(rt)
        events: dict[str, ActivationSettled] = {}
        rt.events.on("subagent/settled", lambda e: events.setdefault(e.activation.id, e))
        disk = SessionError("disk", "", "cannot write the log: full")
        await _natural_end_failing(rt, host, disk)()
        await rt.subagents.start(host, "ok", "work")
        try:
            await bounded(settled.of("c", "ok"))
        finally:
            await close_quietly(rt)
        failure = getattr(events["c"], "failure", missing)
        assert failure is not missing, "ActivationSettled has no field 'failure'"
        assert getattr(events["ok"], "failure", missing) is None
        if isinstance(failure, ActivationTeardownFailed):
            assert [(f.activation, f.boundary, f.error) for f in failure.failures] == [
                ("c", "handle dispose", disk)
            ]
        else:
            assert failure is disk

    drive(main)


# --- fault 5: the notice says how the child ended ----------------------------------------------


def test_the_notice_of_a_child_that_finished_says_finished() -> None:
    async def main(loop: IdleLoop) -> None:
        rt, _models, host = await runtime()
        settled = Settlements(rt)
        received = notices_to(rt, "host")
        await rt.subagents.start(host, "c", "work")
        try:
            await bounded(settled.of("c"))
        finally:
            await close_quietly(rt)
        texts = [m.text for m in received]
        assert len(texts) == 1 and "finished" in texts[0], texts

    drive(main)


def test_the_notice_of_a_child_that_was_stopped_says_stopped() -> None:
    async def main(loop: IdleLoop) -> None:
        rt, models, host = await runtime()
        received = notices_to(rt, "host")
        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late")))
        act = await rt.subagents.start(host, "c", "work")
        await gate.reached.wait()
        try:
            await bounded(rt.subagents.dispose(act))  # mid-turn: stopped
        finally:
            await close_quietly(rt)
        texts = [m.text for m in received]
        assert len(texts) == 1 and "stopped" in texts[0], texts

    drive(main)


# --- fault 6: an activation's own turn cannot await a teardown that covers it ------------------

TEARDOWNS: dict[str, Callable[[Runtime, Agent, Agent], Awaitable[None]]] = {
    "dispose(its own activation)": lambda rt, _host, _p: rt.subagents.dispose(_resident(rt, "c")),
    "drain()": lambda rt, _host, _p: rt.subagents.drain(),
    "drain_descendants([its parent])": lambda rt, _host, p: rt.subagents.drain_descendants([p]),
    "drain_descendants([its grandparent])": lambda rt, host, _p: rt.subagents.drain_descendants(
        [host]
    ),
    "drain_children(its parent, [its id])": lambda rt, _host, p: rt.subagents.drain_children(
        p, ["c"]
    ),
}


def _resident(rt: Runtime, child_id: str) -> Activation:
    act = rt.subagents.get(child_id)
    assert act is not None
    return act


class Teardown:
    """A tool that awaits the teardown it is given, from the turn of the activation ``c``,
    under a hang guard: what it raised (a refusal, or today the guard's TimeoutError) is
    kept."""

    name = "teardown"

    def __init__(self, call: Callable[[Runtime, Agent, Agent], Awaitable[None]]) -> None:
        self.call = call
        self.rt: Runtime | None = None
        self.caught: list[BaseException] = []
        self.done = asyncio.Event()

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        assert self.rt is not None
        rt = self.rt

        async def attempt() -> None:
            await self.call(rt, rt.agents["host"], rt.agents["p"])

        try:
            await returns(attempt(), "the teardown awaited from its own turn")
        except Exception as error:
            self.caught.append(error)
        finally:
            self.done.set()
        return "returned"


@pytest.mark.parametrize("teardown", TEARDOWNS)
def test_an_activations_own_turn_cannot_await_a_teardown_covering_it(teardown: str) -> None:
    """``c`` (a child of the activation ``p``, a root of ``host``) runs a tool that awaits a
    teardown covering ``c`` itself: refused with UsageError, as ``handle.dispose()`` from an
    agent's own turn is, and ``aclose()`` returns."""

    async def main(loop: IdleLoop) -> None:
        tool = Teardown(TEARDOWNS[teardown])
        rt, models, host = await runtime(tool)
        tool.rt = rt
        gate = Gate("p")
        models.script("p", Wait(gate, Reply("p done")))
        models.script(
            "c",
            Reply(tool_calls=(ToolCall("t1", "teardown"),), finish="tool_calls"),
            Reply("c done"),
        )
        p = await rt.subagents.start(host, "p", "work")
        await gate.reached.wait()
        await rt.subagents.start(p.agent, "c", "work")
        try:
            await bounded(tool.done.wait(), GUARD)
        finally:
            gate.open()
        await bounded(rt.aclose(), GUARD)
        assert [type(e) for e in tool.caught] == [UsageError], tool.caught

    drive(main)


class Probe:
    """A tool that awaits ``call(rt)`` from whichever turn runs it, under a hang guard, and
    keeps what it raised and the registry right after: every resident activation's stage,
    and whether admission is drained."""

    name = "probe"

    def __init__(self, call: Callable[[Runtime], Awaitable[object]]) -> None:
        self.call = call
        self.rt: Runtime | None = None
        self.caught: list[BaseException] = []
        self.after: tuple[dict[str, str], bool] | None = None
        self.done = asyncio.Event()

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        rt = self.rt
        assert rt is not None
        try:
            await returns(self.call(rt), "the call awaited from a turn")
        except Exception as error:
            self.caught.append(error)
        finally:
            stages = {i: _resident(rt, i).stage for i in rt.subagents.resident}
            self.after = (stages, rt.subagents.draining)
            self.done.set()
        return "returned"


def _probes(agent_id: str) -> Reply:
    return Reply(tool_calls=(ToolCall(f"{agent_id}-t", "probe"),), finish="tool_calls")


def _refused(who: str, call: str, what: str, after: str) -> str:
    return (
        rf"^agent '{who}': its own turn cannot await {call}, which tears down {what} and so "
        rf"waits for that turn to end; {after}, return from the turn$"
    )


INSIDE: dict[str, tuple[Callable[[Runtime], Awaitable[object]], str]] = {
    "dispose(its own activation)": (
        lambda rt: rt.subagents.dispose(_resident(rt, "c")),
        _refused("c", r"dispose\(\)", "its activation 'c'", "nothing was torn down"),
    ),
    "drain_descendants([its grandparent])": (
        lambda rt: rt.subagents.drain_descendants([rt.agents["host"]]),
        _refused("c", r"drain_descendants\(\)", "activation 'p' above it", "nothing was torn down"),
    ),
    "drain()": (
        lambda rt: rt.subagents.drain(),
        _refused("c", r"drain\(\)", "its activation 'c'", "nothing was torn down"),
    ),
}


@pytest.mark.parametrize("inside", INSIDE)
def test_a_refused_teardown_from_inside_names_the_call_and_tears_nothing_down(
    inside: str,
) -> None:
    """``c`` (a child of ``p``) calls a teardown covering it from its own turn: the refusal
    names the call and the activation it would tear down, and nothing changed."""

    async def main(loop: IdleLoop) -> None:
        call, message = INSIDE[inside]
        probe = Probe(call)
        rt, models, host = await runtime(probe)
        probe.rt = rt
        gate = Gate("p")
        models.script("p", Wait(gate, Reply("p done")))
        models.script("c", _probes("c"), Reply("c done"))
        p = await rt.subagents.start(host, "p", "work")
        await gate.reached.wait()
        await rt.subagents.start(p.agent, "c", "work")
        try:
            await bounded(probe.done.wait(), GUARD)
        finally:
            gate.open()
            await close_quietly(rt)
        assert len(probe.caught) == 1, probe.caught
        with pytest.raises(UsageError, match=message):
            raise probe.caught[0]
        assert probe.after == ({"p": "active", "c": "active"}, False)

    drive(main)


def test_a_child_spawned_below_an_activation_cannot_await_its_teardown() -> None:
    """``s``, spawned by a tool of the activation ``c``, awaits ``dispose(c)``: ``c``'s
    teardown would wait for the spawning turn, which waits for ``s``."""

    async def main(loop: IdleLoop) -> None:
        probe = Probe(lambda rt: rt.subagents.dispose(_resident(rt, "c")))
        delegate = Delegate()
        rt, models, host = await runtime(probe, delegate)
        probe.rt = delegate.rt = rt
        spawn = ToolCall("c-t", "delegate", {"id": "s"})
        models.script("c", Reply(tool_calls=(spawn,), finish="tool_calls"), Reply("c done"))
        models.script("s", _probes("s"), Reply("s done"))
        settled = Settlements(rt)
        await rt.subagents.start(host, "c", "work")
        try:
            await bounded(probe.done.wait(), GUARD)
            await bounded(settled.of("c"), GUARD)  # c's turn went on, and it ended on its own
        finally:
            await close_quietly(rt)
        message = _refused("s", r"dispose\(\)", "activation 'c' above it", "nothing was torn down")
        assert len(probe.caught) == 1, probe.caught
        with pytest.raises(UsageError, match=message):
            raise probe.caught[0]

    drive(main)


def test_awaiting_from_inside_a_teardown_begun_outside_is_refused() -> None:
    """The host begins ``dispose(c)`` while ``c``'s tool runs; the tool then awaits that same
    :class:`Pending`: refused (it would wait for its own turn), and the teardown completes."""

    async def main(loop: IdleLoop) -> None:
        begun: list[object] = []
        entered, go = asyncio.Event(), asyncio.Event()

        async def await_it(_rt: Runtime) -> object:
            entered.set()
            await go.wait()
            return await begun[0]  # type: ignore[misc]

        probe = Probe(await_it)
        rt, models, host = await runtime(probe)
        probe.rt = rt
        settled = Settlements(rt)
        models.script("c", _probes("c"), Reply("c done"))
        c = await rt.subagents.start(host, "c", "work")
        try:
            await bounded(entered.wait())
            begun.append(rt.subagents.dispose(c))
            go.set()
            await bounded(probe.done.wait(), GUARD)
            await bounded(begun[0], GUARD)  # type: ignore[arg-type]
            assert settled.ids == ["c"]
        finally:
            await close_quietly(rt)
        message = _refused("c", r"dispose\(\)", "its activation 'c'", "the teardown has begun")
        assert len(probe.caught) == 1, probe.caught
        with pytest.raises(UsageError, match=message):
            raise probe.caught[0]

    drive(main)


OUTSIDE: dict[str, Callable[[Runtime], Awaitable[object]]] = {
    "drain_children(its own agent, [its child])": lambda rt: rt.subagents.drain_children(
        rt.agents["p"], ["c"]
    ),
    "drain_descendants([its own agent])": lambda rt: rt.subagents.drain_descendants(
        [rt.agents["p"]]
    ),
}


@pytest.mark.parametrize("outside", OUTSIDE)
def test_a_parents_own_turn_may_await_the_teardown_of_its_children(outside: str) -> None:
    """The refusal is for turns inside what is torn down: ``p``'s own turn awaiting the
    teardown of its child ``c`` returns once ``c`` settled."""

    async def main(loop: IdleLoop) -> None:
        probe = Probe(OUTSIDE[outside])
        rt, models, host = await runtime(probe)
        probe.rt = rt
        settled = Settlements(rt)
        gate = Gate("p")
        models.script("p", Wait(gate, _probes("p")), Reply("p done"))
        models.script("c", Wait(Gate("c"), Reply("late")))
        p = await rt.subagents.start(host, "p", "work")
        await gate.reached.wait()
        await rt.subagents.start(p.agent, "c", "work")
        gate.open()
        try:
            await bounded(probe.done.wait(), GUARD)
        finally:
            await close_quietly(rt)
        assert probe.caught == []
        assert probe.after is not None and probe.after[0] == {"p": "active"}
        assert settled.ids[0] == "c"

    drive(main)


# --- fault 7: a listener's BaseException during a teardown -------------------------------------


def interrupt_once(rt: Runtime, agent_id: str) -> asyncio.Event:
    """An ``agent/disposing`` listener raising :class:`Interrupt` for ``agent_id``, once;
    the event is set when it did."""
    fired = asyncio.Event()

    def listener(event: DisposalStarted) -> None:
        if event.agent.id == agent_id and not fired.is_set():
            fired.set()
            raise Interrupt(f"interrupt at {agent_id}'s disposal")

    rt.events.on("agent/disposing", listener)
    return fired


async def converged(rt: Runtime, *activations: Activation) -> None:
    """Every one of ``activations`` settled and released its slot, and a later drain and
    close return normally (no stale interrupt)."""
    assert [a.stage for a in activations] == ["settled"] * len(activations)
    assert rt.subagents.resident == () and rt.subagents.slots_held == 0
    await bounded(rt.subagents.drain())
    await bounded(rt.aclose(), GUARD)


def test_an_interrupt_during_a_dispose_reaches_its_caller_once_and_the_child_converges() -> None:
    async def main(loop: IdleLoop) -> None:
        rt, models, host = await runtime()
        interrupt_once(rt, "c")
        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late")))
        act = await rt.subagents.start(host, "c", "work")
        await gate.reached.wait()
        try:
            with pytest.raises(Interrupt):
                await bounded(rt.subagents.dispose(act))
            await converged(rt, act)
        finally:
            await close_quietly(rt)

    drive(main)


def test_an_interrupt_during_a_natural_end_lets_a_later_followup_resume_the_child() -> None:
    async def main(loop: IdleLoop) -> None:
        rt, _models, host = await runtime()
        settled = Settlements(rt)
        twice = asyncio.Event()
        rt.events.on("subagent/settled", lambda _e: twice.set() if len(settled.log) == 2 else None)
        fired = interrupt_once(rt, "c")
        act = await rt.subagents.start(host, "c", "work")
        try:
            await bounded(fired.wait())
            # resumed cold once its teardown settled: a fresh activation ends on its own
            again = await returns(rt.subagents.followup("c", "more"), "followup('c')")
            assert again is not act
            await bounded(twice.wait())
            assert settled.ids == ["c", "c"]
            await converged(rt, act, again)
        finally:
            await close_quietly(rt)

    drive(main)


def test_an_interrupt_in_a_childs_teardown_reaches_the_parents_disposer_once() -> None:
    async def main(loop: IdleLoop) -> None:
        rt, models, host = await runtime()
        interrupt_once(rt, "c")
        gate_p, gate_c = Gate("p"), Gate("c")
        models.script("p", Wait(gate_p, Reply("late")))
        models.script("c", Wait(gate_c, Reply("late")))
        p = await rt.subagents.start(host, "p", "work")
        await gate_p.reached.wait()
        c = await rt.subagents.start(p.agent, "c", "work")
        await gate_c.reached.wait()
        try:
            with pytest.raises(Interrupt):
                await bounded(rt.subagents.dispose(p))
            await converged(rt, c, p)
        finally:
            await close_quietly(rt)

    drive(main)


# --- fault 8: a cancel reaches every generation of a deep spawn chain --------------------------

DEPTH = 150


class Delegate:
    """A tool spawning the child ``args["id"]``."""

    name = "delegate"

    def __init__(self) -> None:
        self.rt: Runtime | None = None

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        assert self.rt is not None
        return (await self.rt.subagents.spawn(signal, SubagentSpec(args["id"], "go"))).text


def test_cancelling_the_top_of_a_deep_spawn_chain_cancels_every_generation() -> None:
    async def main(loop: IdleLoop) -> None:
        delegate = Delegate()
        models = Models()
        rt = Runtime(models, [delegate])
        delegate.rt = rt
        for i in range(DEPTH):
            spawn = ToolCall("t", "delegate", {"id": f"g{i + 1}"})
            models.script(f"g{i}", Reply(tool_calls=(spawn,), finish="tool_calls"))
        deepest = Gate("deepest")
        models.script(f"g{DEPTH}", Wait(deepest, Reply("late")))  # cooperates with its signal
        outcomes: dict[str, object] = {}

        def ended(event: TurnEnded) -> None:
            outcomes[event.agent.id] = event.outcome["kind"]

        rt.events.on("turn/end", ended)
        top = (await rt.create_agent("g0")).agent
        top.followup(UserMessage("m1", "go"))
        await bounded(deepest.reached.wait(), GUARD)
        top.cancel()
        try:
            await returns(top.when_idle(), f"when_idle() of the top of {DEPTH} generations")
        finally:
            deepest.open()  # whatever the cancel missed ends, so the runtime closes
            await bounded(rt.aclose(), GUARD)
        assert outcomes == {f"g{i}": "aborted" for i in range(DEPTH + 1)}

    drive(main)


# --- fault 9: bad arguments are UsageErrors naming them ----------------------------------------

BAD_CALLS: dict[str, tuple[object, Callable[[Runtime, Agent], object]]] = {
    "followup(['c1'], ...)": (["c1"], lambda rt, _h: rt.subagents.followup(["c1"], "x")),  # type: ignore[arg-type]
    "drain_children(host, None)": (None, lambda rt, h: rt.subagents.drain_children(h, None)),  # type: ignore[arg-type]
    "drain_children(host, 5)": (5, lambda rt, h: rt.subagents.drain_children(h, 5)),  # type: ignore[arg-type]
    "get(['c1'])": (["c1"], lambda rt, _h: rt.subagents.get(["c1"])),  # type: ignore[arg-type]
    # the rest of Subagents' public methods, audited for the same class of bug
    "get(5)": (5, lambda rt, _h: rt.subagents.get(5)),  # type: ignore[arg-type]
    "owner(['c1'])": (["c1"], lambda rt, _h: rt.subagents.owner(["c1"])),  # type: ignore[arg-type]
    "holds(['c1'])": (["c1"], lambda rt, _h: rt.subagents.holds(["c1"])),  # type: ignore[arg-type]
    "followup(None, ...)": (None, lambda rt, _h: rt.subagents.followup(None, "x")),  # type: ignore[arg-type]
    "start(host, ['c1'], ...)": (
        ["c1"],
        lambda rt, h: rt.subagents.start(h, ["c1"], "x"),  # type: ignore[arg-type]
    ),
    "drain_children(host, [['c1']])": (
        [["c1"]],
        lambda rt, h: rt.subagents.drain_children(h, [["c1"]]),  # type: ignore[list-item]
    ),
    "drain_children(host, 'c1')": ("c1", lambda rt, h: rt.subagents.drain_children(h, "c1")),
    "drain_descendants(5)": (5, lambda rt, _h: rt.subagents.drain_descendants(5)),  # type: ignore[arg-type]
    "drain_descendants('host')": (
        "host",
        lambda rt, _h: rt.subagents.drain_descendants("host"),  # type: ignore[arg-type]
    ),
    "dispose('c1')": ("c1", lambda rt, _h: rt.subagents.dispose("c1")),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("call", BAD_CALLS)
def test_a_bad_child_id_argument_is_a_usage_error_naming_it(call: str) -> None:
    async def main(loop: IdleLoop) -> None:
        rt, _models, host = await runtime()
        bad, make = BAD_CALLS[call]
        try:
            with pytest.raises(UsageError) as refused:
                made = make(rt, host)
                if asyncio.iscoroutine(made):
                    await made
            assert repr(bad) in str(refused.value)
        finally:
            await bounded(rt.aclose(), GUARD)

    drive(main)


# --- fault 10: a failed teardown nobody awaits is not "never retrieved" ------------------------


def _begin_dispose(rt: Runtime, _host: Agent, act: Activation) -> object:
    return rt.subagents.dispose(act)


def _begin_drain(rt: Runtime, _host: Agent, _act: Activation) -> object:
    return rt.subagents.drain()


def _begin_drain_children(rt: Runtime, host: Agent, _act: Activation) -> object:
    return rt.subagents.drain_children(host, ["c"])


UNAWAITED: dict[str, Callable[[Runtime, Agent, Activation], object]] = {
    "dispose": _begin_dispose,
    "drain": _begin_drain,
    "drain_children": _begin_drain_children,
}


@pytest.mark.parametrize("begin", UNAWAITED)
def test_a_failed_teardown_nobody_awaits_leaves_nothing_unretrieved(begin: str) -> None:
    async def main(loop: IdleLoop) -> None:
        reported: list[str] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: reported.append(str(context.get("message")))
        )
        rt, models, host = await runtime()
        settled = Settlements(rt)
        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late")))
        disk = SessionError("disk", "", "cannot write the log: full")
        session, owner = failing_at(("flushing",), disk)
        act = await rt.subagents.start(host, "c", "work", session=session)
        owner.append(act)
        await gate.reached.wait()
        UNAWAITED[begin](rt, host, act)  # begun inside the call; nobody awaits it
        await bounded(settled.of("c"))
        assert act.failed is True
        await close_quietly(rt)
        await loop.idle()
        gc.collect()  # a future nobody retrieved reports when it is collected
        assert [m for m in reported if "never retrieved" in m] == []

    drive(main)
