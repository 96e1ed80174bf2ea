"""The ``transitions``-hosted control state agrees with the compiled interpreter.

The differential test fires every event, with every argument tuple, in every state of each
table's finite domain (reachable or not) on a :class:`HostedMachine` and through
:meth:`Machine.fire_args`, and requires the same answer: the same row (or the same ignore), the
same next state and the same effects in order, or the same error with the same message.
"""

from __future__ import annotations

import math

import pytest
import transitions
from transitions.extensions.asyncio import AsyncMachine

from fsm_core._errors import FsmError, NotEnabled, Rejected, TransitionError
from fsm_core.host import HostedMachine
from fsm_core.table import Effect, Machine, State, Step, load_spec
from fsm_core.table._expr import Value
from fsm_core.table._machine import CompiledRow
from tests.helpers import sweep

SPEC = load_spec()

Outcome = tuple[str, Step | str]


def _interpreted(machine: Machine, state: State, event: str, args: tuple[Value, ...]) -> Outcome:
    try:
        return ("step", machine.fire_args(state, event, args))
    except TransitionError as e:
        return (type(e).__name__, str(e))


def _expected_cases(machine: Machine) -> int:
    """The size of the whole domain, from the table's declarations alone."""
    table = machine.table
    states = len(table.state_names) * math.prod(len(v.type.values) for v in table.variables)
    calls = sum(math.prod(len(t.values) for _, t in spec.params) for spec in table.events.values())
    return states * calls


def test_both_tables_are_hosted() -> None:
    assert {"agent", "activation"} <= set(SPEC.machines)


@pytest.mark.parametrize("name", sweep(sorted(SPEC.machines), str, fast={"admission"}))
@pytest.mark.parametrize("path", ["step", "trigger"])
def test_hosted_machine_agrees_with_interpreter_everywhere(name: str, path: str) -> None:
    """``step`` (the generated rows in place, what the runtime fires) and ``trigger`` (through
    ``transitions``, what ``get_triggers`` and ``may_trigger`` consult) each give the pure
    interpreter's answer, so they give each other's; so do ``takes`` and ``holds``, which the
    runtime asks too."""
    machine = SPEC.machines[name]
    hosted = HostedMachine(machine)
    fire = hosted.step if path == "step" else hosted.trigger
    calls = [
        (event, args, dict(zip([p for p, _ in spec.params], args, strict=True)))
        for event, spec in machine.table.events.items()
        for args in machine.all_arguments(event)
    ]
    compared = 0
    outcomes: dict[str, int] = {}
    for state in machine.domain():
        hosted.load(state)
        for definition in machine.table.defs if path == "step" else ():
            assert hosted.holds(definition) == machine.holds(definition, state), definition
        for event, args, kwargs in calls:
            expected = _interpreted(machine, state, event, args)
            hosted.load(state)
            if path == "step":
                row = machine.lookup(state, event, args)
                assert hosted.takes(event, **kwargs) == isinstance(row, CompiledRow), event
            got: Outcome
            try:
                got = ("step", fire(event, **kwargs))
            except TransitionError as e:
                got = (type(e).__name__, str(e))
                assert hosted.snapshot() == state, f"{name}: {event}{args} failed but moved"
            assert got == expected, f"{name}: {event}{args} in {machine.format_state(state)}"
            kind = got[0]
            if isinstance(got[1], Step) and got[1].row is None:
                kind = "ignored"
            outcomes[kind] = outcomes.get(kind, 0) + 1
            compared += 1
    assert compared == _expected_cases(machine)
    # Every outcome class occurs, so the comparison exercised each path of the host. The
    # registry's door has only input events, each handled in every state: nothing is
    # NotEnabled there.
    classes = {"step", "ignored", "Rejected", "NotEnabled"}
    assert set(outcomes) == classes - ({"NotEnabled"} if name == "admission" else set()), outcomes


# --- introspection --------------------------------------------------------------------------------


def _agent(**values: Value) -> HostedMachine:
    agent = SPEC.machines["agent"]
    hosted = HostedMachine(agent)
    hosted.load(agent.state(**values))
    return hosted


def test_host_is_a_synchronous_unqueued_transitions_machine() -> None:
    hosted = _agent()
    assert isinstance(hosted.machine, transitions.Machine)
    assert not isinstance(hosted.machine, AsyncMachine)
    assert not hosted.machine.has_queue
    hosted.fire("dispose")
    assert hosted.machine.get_model_state(hosted).name == hosted.state == "disposing"
    assert not hasattr(hosted, "dispose")  # no trigger methods set onto the model


def test_state_values_and_snapshot_read_the_live_store() -> None:
    hosted = _agent()
    assert hosted.state == "idle"
    hosted.fire("send", wake=True, lane="next_turn")
    hosted.fire("start")
    assert hosted.state == "running"
    assert hosted.values == {
        "phase": "running", "holder": "live", "reason": "none", "turn": False, "pending": True,
        "latch": False, "marker": False, "scheduled": False, "closing": False, "shut": False,
        "unwound": False,
    }  # fmt: skip
    assert hosted.snapshot() == tuple(hosted.values.values())
    assert repr(hosted) == (
        "<HostedMachine agent running{holder=live, reason=none, turn=false, pending=true, "
        "latch=false, marker=false, scheduled=false, closing=false, shut=false, unwound=false}>"
    )


def test_get_triggers_lists_handled_events_and_omits_rejected_ones() -> None:
    hosted = _agent()
    assert "send" in hosted.get_triggers("idle")
    assert hosted.get_triggers() == hosted.get_triggers("idle")
    disposed = hosted.get_triggers("disposed")
    assert "send" not in disposed  # rejected: the agent is disposed
    assert set(disposed) == {"cancel", "dispose", "shut"}  # ignored on purpose: harmless no-ops


def test_may_trigger_says_whether_fire_would_succeed() -> None:
    idle = _agent()
    assert idle.may_trigger("send", wake=True, lane="next_turn")
    assert not idle.may_trigger("claim")  # rejected pair: no driver owns the agent
    scheduled = _agent(scheduled=True, pending=True)
    # A reject row: its guard holds, so transitions' own may_trigger would say True.
    assert not scheduled.may_trigger("maintenance_start")
    assert scheduled.may_trigger("start")
    assert not _agent(phase="disposing", closing=True, scheduled=True).may_trigger("dispose_finish")
    assert _agent(phase="disposed", closing=True).may_trigger(
        "cancel", cause="user", keep_inbox=True
    )


# --- refusals -------------------------------------------------------------------------------------


def test_send_to_disposed_agent_is_rejected() -> None:
    hosted = _agent(phase="disposed", closing=True)
    before = hosted.snapshot()
    with pytest.raises(Rejected, match=r"^the agent is disposed; it accepts no more messages$"):
        hosted.fire("send", wake=True, lane="next_turn")
    assert hosted.snapshot() == before


def test_reject_row_raises_its_reason() -> None:
    hosted = _agent(scheduled=True, pending=True)
    with pytest.raises(
        Rejected,
        match=r"^a driver is scheduled; maintenance needs an idle agent with no driver pending$",
    ):
        hosted.fire("maintenance_start")
    assert hosted.state == "idle"


def test_no_enabled_row_raises_the_interpreters_message() -> None:
    hosted = _agent(phase="disposing", closing=True, scheduled=True)
    with pytest.raises(
        NotEnabled,
        match=(
            r"^agent: no row of dispose_finish\(\) is enabled in disposing\{holder=none, "
            r"reason=none, turn=false, pending=false, latch=false, marker=false, scheduled=true, "
            r"closing=true, shut=false, unwound=false\}$"
        ),
    ):
        hosted.fire("dispose_finish")


def test_ignored_event_is_a_no_op() -> None:
    hosted = _agent(phase="disposed", closing=True)
    before = hosted.snapshot()
    step = hosted.step("cancel", cause="user", keep_inbox=False)
    assert (step.row, step.effects, hosted.snapshot()) == (None, (), before)


def test_wrong_arguments_are_refused_before_anything_runs() -> None:
    hosted = _agent()
    with pytest.raises(TypeError, match=r"^agent\.send takes \(wake, lane\), got \(wake\)$"):
        hosted.fire("send", wake=True)
    with pytest.raises(ValueError, match=r"^agent\.send: lane='sideways' is not a value of lane$"):
        hosted.fire("send", wake=True, lane="sideways")
    assert hosted.snapshot() == SPEC.machines["agent"].initial


def test_load_refuses_a_state_outside_the_domain() -> None:
    hosted = _agent()
    with pytest.raises(ValueError, match=r"^agent: holder='dead' is not a value of holder$"):
        hosted.load(("idle", "dead", *SPEC.machines["agent"].initial[2:]))
    with pytest.raises(ValueError, match=r"^agent has no state 'asleep'$"):
        hosted.load(("asleep", *SPEC.machines["agent"].initial[1:]))


def test_a_host_that_disagrees_with_the_table_says_so() -> None:
    # A table compiled for this test alone: its transitions machine is shared by its hosts.
    hosted = HostedMachine(Machine(SPEC.machines["agent"].table))
    other = HostedMachine(hosted.spec)
    assert other.machine is hosted.machine
    hosted.machine.remove_transition("send", source="idle")
    with pytest.raises(
        FsmError,
        match=(
            r"^agent: the hosted machine and the table disagree on send in idle\{.*\}: "
            r"transitions found no transition, the table chooses row 'send\.idle\.wake'$"
        ),
    ):
        hosted.trigger("send", wake=True, lane="next_turn")
    # Firing is the interpreter's: it never consults transitions.
    assert [str(e) for e in other.fire("send", wake=True, lane="next_turn")] == [
        "enqueue(next_turn)",
        "schedule_driver()",
    ]


def test_hosts_of_one_table_share_one_transitions_machine_built_on_first_use() -> None:
    spec = Machine(SPEC.machines["agent"].table)
    hosts = [HostedMachine(spec) for _ in range(3)]
    hosts[0].fire("send", wake=True, lane="next_turn")
    assert len({id(h.machine) for h in hosts}) == 1
    # Each host is its own model: the shared machine reads each one's state.
    assert [h.machine.get_model_state(h).name for h in hosts] == ["idle"] * 3
    assert hosts[0].may_trigger("start") and not hosts[1].may_trigger("start")


# --- re-entrancy ----------------------------------------------------------------------------------
# Each test runs through the interpreter (``fire``) and through transitions (``trigger``).


def _fire(
    hosted: HostedMachine, path: str, event: str, context: object = None, /, **kwargs: Value
) -> list[Effect]:
    if path == "fire":
        return hosted.fire(event, context, **kwargs)
    return list(hosted.trigger(event, context, **kwargs).effects)


@pytest.mark.parametrize("path", ["fire", "trigger"])
def test_cancel_inside_running_status_is_applied_at_once(path: str) -> None:
    agent = SPEC.machines["agent"]
    seen: list[Effect] = []
    inner: list[list[Effect]] = []

    def perform(effect: Effect) -> None:
        seen.append(effect)
        if effect == Effect("publish_status", ("running",)):
            inner.append(_fire(hosted, path, "cancel", cause="user", keep_inbox=False))

    hosted = HostedMachine(agent, perform=perform)
    hosted.load(agent.state(scheduled=True, pending=True))
    outer = _fire(hosted, path, "start")

    assert [str(e) for e in outer] == ["open_holder()", "publish_status(running)"]
    assert [[str(e) for e in effects] for effects in inner] == [
        ["notify_cancel_requested(user)", "clear_inbox()", "abort_holder(user)"]
    ]
    assert [str(e) for e in seen] == [
        "open_holder()",
        "publish_status(running)",
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "abort_holder(user)",
    ]
    assert (hosted.state, hosted.values["holder"], hosted.values["reason"]) == (
        "cancelling",
        "aborted",
        "user",
    )


@pytest.mark.parametrize("path", ["fire", "trigger"])
def test_later_effects_see_a_wake_sent_inside_idle_status(path: str) -> None:
    agent = SPEC.machines["agent"]
    running = agent.state(phase="running", holder="live")
    alone = HostedMachine(agent)
    alone.load(running)
    assert [str(e) for e in _fire(alone, path, "claim")] == [
        "release_holder()",
        "publish_status(idle)",
        "settle_idle()",
    ]

    def perform(effect: Effect) -> None:
        if effect == Effect("publish_status", ("idle",)):
            _fire(hosted, path, "send", wake=True, lane="next_turn")

    hosted = HostedMachine(agent, perform=perform)
    hosted.load(running)
    # The listener's wake scheduled a driver, so the agent is no longer quiescent when the
    # row reaches its `{ when = "quiescent" }` block: when_idle() waiters are not released.
    effects = _fire(hosted, path, "claim")
    assert [str(e) for e in effects] == ["release_holder()", "publish_status(idle)"]
    assert (hosted.state, hosted.values["scheduled"], hosted.values["pending"]) == (
        "idle",
        True,
        True,
    )


@pytest.mark.parametrize("path", ["fire", "trigger"])
def test_first_abort_wins_when_an_observer_cancels_again(path: str) -> None:
    agent = SPEC.machines["agent"]

    def perform(effect: Effect) -> None:
        if effect == Effect("notify_cancel_requested", ("user",)):
            _fire(hosted, path, "cancel", cause="parent", keep_inbox=True)

    hosted = HostedMachine(agent, perform=perform)
    hosted.load(agent.state(phase="running", holder="live", turn=True))
    outer = _fire(hosted, path, "cancel", cause="user", keep_inbox=True)
    # The observer's cancel aborted the holder first; the outer row's abort block is skipped.
    assert [str(e) for e in outer] == ["notify_cancel_requested(user)"]
    assert (hosted.values["holder"], hosted.values["reason"]) == ("aborted", "parent")


@pytest.mark.parametrize("path", ["fire", "trigger"])
def test_each_fire_hands_its_own_context_to_the_effects_of_its_row(path: str) -> None:
    seen: list[tuple[str, object]] = []

    def perform(effect: Effect) -> None:
        seen.append((str(effect), hosted.context))
        if effect.name == "enqueue" and hosted.context == "m1":
            # a listener sends again
            _fire(hosted, path, "send", "m2", wake=False, lane="next_turn")

    hosted = HostedMachine(SPEC.machines["agent"], perform=perform)
    _fire(hosted, path, "send", "m1", wake=True, lane="next_turn")
    assert seen == [
        ("enqueue(next_turn)", "m1"),
        ("enqueue(next_turn)", "m2"),  # the nested fire's own context
        ("schedule_driver()", "m1"),  # the outer one's is back once the nested fire returned
    ]
    assert hosted.context is None  # outside any fire
    _fire(hosted, path, "cancel", cause="user", keep_inbox=False)  # no context: None while it runs
    assert seen[-2:] == [("notify_cancel_requested(user)", None), ("clear_inbox()", None)]
