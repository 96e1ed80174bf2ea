"""Stories: the seeds' races told as data, event by event, for the conformance vectors.

A :class:`Story` is a sequence of events fired on one machine from its initial state; a step
may install listeners (:class:`Listen`) that fire more events re-entrantly inside a
notification, as a synchronous listener does. ``fsm-core vectors`` runs each story on the
interpreter and writes every step as a vector (``story/<name>/<step>``) with its rows, its
effects in order, the state each notification showed its listeners and the state it left.
``tests/test_agent_table.py`` and ``tests/test_activation_table.py`` read those vectors back
and pin, in words, what each story shows; a port replays the same vectors. So the stories are
the one set of hand-written vectors, and the tests are readers of it.

A story names the race it decides; its steps say only what happens, never what should come of
it: the expectations are the vectors (what the tables do) and the tests (what that means).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fsm_core.table._expr import Value

__all__ = ["STORIES", "Do", "Listen", "Story"]


@dataclass(frozen=True, slots=True)
class Listen:
    """A listener that fires ``event(args)`` inside the ``nth`` performance of ``effect``
    during the step (counting the performances of nested calls too), then never again."""

    effect: str
    event: str
    args: Mapping[str, Value] = field(default_factory=dict)
    nth: int = 1


@dataclass(frozen=True, slots=True)
class Do:
    """One step: fire ``event(args)`` with the step's listeners installed."""

    event: str
    args: Mapping[str, Value] = field(default_factory=dict)
    listen: tuple[Listen, ...] = ()


@dataclass(frozen=True, slots=True)
class Story:
    name: str
    machine: str
    doc: str
    steps: tuple[Do, ...]


# --- agent ---------------------------------------------------------------------------------------

FOLLOWUP = Do("send", {"wake": True, "lane": "next_turn"})
"""``agent.followup(message)``: a waking next-turn send."""
QUIET = Do("send", {"wake": False, "lane": "next_turn"})
"""``agent.send(message, wakeup=False)``: queue without waking."""


def cancel(cause: str = "user", keep_inbox: bool = False, *listen: Listen) -> Do:
    return Do("cancel", {"cause": cause, "keep_inbox": keep_inbox}, listen)


def retire(end: str = "completed", *listen: Listen) -> Do:
    return Do("retire", {"end": end}, listen)


INTERRUPTED = retire("error")
"""The driver retires an interrupted turn: its seams raised ``Aborted``, so its own ending is
``error``, and the table records ``aborted`` or ``disposed`` from the holder and lifecycle."""


START, CLAIM, CONVERGE = Do("start"), Do("claim"), Do("converge")
TAKE = Do("take_prompt", {"rest": False})
RUNNING = (FOLLOWUP, START, CLAIM, TAKE)
"""Into a live turn: a followup, the driver's start, the claim that opens the turn, and its
prompt taken."""


def on(effect: str, event: str, **args: Value) -> Listen:
    return Listen(effect, event, args)


def followup_inside(effect: str) -> Listen:
    return on(effect, "send", wake=True, lane="next_turn")


def agent(name: str, doc: str, *steps: Do) -> Story:
    return Story(name, "agent", doc, steps)


AGENT_STORIES = (
    agent(
        "idle_cancel_emits_nothing_and_arms_nothing",
        "A cancel of an idle agent with nothing queued notifies nobody and leaves no marker: "
        "the next followup runs a turn.",
        cancel(),
        FOLLOWUP,
        START,
    ),
    agent(
        "cancel_discarding_idle_queued_work_notifies_first",
        "A cancel that discards queued work on an idle agent is effective: it notifies before "
        "it clears, and arms nothing.",
        QUIET,
        cancel(),
    ),
    agent(
        "wake_is_asynchronous",
        "A followup to an idle agent queues and schedules the driver; no turn starts inside "
        "the call.",
        FOLLOWUP,
    ),
    agent(
        "pre_run_cancel_opens_no_turn_and_publishes_no_status",
        "Decision 1: a cancel between the wake and the driver's start leaves the pre-run "
        "marker; the driver then opens no turn and publishes no status.",
        FOLLOWUP,
        cancel(),
        START,
    ),
    agent(
        "replacement_queued_after_pre_run_cancel_runs",
        "A waking send after a pre-run cancel clears the marker: the scheduled driver runs it.",
        FOLLOWUP,
        cancel(),
        FOLLOWUP,
        START,
    ),
    agent(
        "pre_run_keep_inbox_cancel_parks_until_a_later_wake",
        "A keep_inbox pre-run cancel parks the work: a quiet send does not wake it, the next "
        "waking send does.",
        FOLLOWUP,
        cancel("parent", True),
        START,
        QUIET,
        FOLLOWUP,
        START,
        CLAIM,
    ),
    agent(
        "holder_is_installed_before_running_is_published",
        "A status listener sees a live holder when running is published.",
        FOLLOWUP,
        START,
    ),
    agent(
        "replacement_from_running_listener_gets_fresh_holder_without_idle",
        "A running listener cancels and sends a replacement: the driver claims it under a fresh "
        "holder without publishing idle.",
        FOLLOWUP,
        Do(
            "start",
            listen=(
                on("publish_status", "cancel", cause="user", keep_inbox=False),
                on("publish_status", "send", wake=True, lane="next_turn"),
            ),
        ),
        CLAIM,
        CLAIM,
        TAKE,
    ),
    agent(
        "a_turn_opens_before_it_claims_one_prompt_and_the_rest_runs_next",
        "Issue 11: turn/start precedes the claim; a claim takes one next-turn message and the "
        "same driver runs the rest as its next turn without publishing idle.",
        FOLLOWUP,
        FOLLOWUP,
        START,
        CLAIM,
        Do("take_prompt", {"rest": True}),
        retire(),
        CONVERGE,
        CLAIM,
        TAKE,
        retire(),
        CONVERGE,
    ),
    agent(
        "a_turn_start_observer_cancel_discards_the_unclaimed_prompt",
        "A turn/start observer's clearing cancel discards the prompt the turn has not claimed "
        "yet: the driver never takes it, and the turn ends aborted.",
        FOLLOWUP,
        START,
        Do("claim", listen=(on("publish_turn_start", "cancel", cause="user", keep_inbox=False),)),
        TAKE,
        INTERRUPTED,
        CONVERGE,
    ),
    agent(
        "effective_cancel_notifies_then_clears_then_aborts",
        "A cancel of a live turn: cancel-requested first, then the clear, then the abort.",
        *RUNNING,
        cancel(),
    ),
    agent(
        "repeated_cancel_is_first_wins_but_still_clears_new_work",
        "A second cancel keeps the first cause, yet a clearing one still discards work queued "
        "since.",
        *RUNNING,
        cancel("user", True),
        cancel("parent", True),
        FOLLOWUP,
        cancel("parent", False),
    ),
    agent(
        "cancel_from_cancel_requested_observer_wins_the_reason",
        "A cancel-requested observer that cancels with another cause wins the reason: the "
        "holder is aborted once, with the observer's cause.",
        *RUNNING,
        cancel(
            "user", False, on("notify_cancel_requested", "cancel", cause="parent", keep_inbox=False)
        ),
    ),
    agent(
        "observer_work_is_cleared_abort_observer_work_is_latched",
        "Work a cancel-requested observer sends is pre-abort and cleared with the rest; work an "
        "abort observer sends is latched and replayed after convergence.",
        *RUNNING,
        cancel(
            "user",
            False,
            followup_inside("notify_cancel_requested"),
            followup_inside("abort_holder"),
        ),
        INTERRUPTED,
        CONVERGE,
        START,
    ),
    agent(
        "keep_inbox_parks_pre_abort_work_and_replays_post_abort_wakes",
        "A keep_inbox cancel parks work sent before the abort and replays a wake sent after it.",
        *RUNNING,
        FOLLOWUP,
        cancel("user", True),
        INTERRUPTED,
        CONVERGE,
        FOLLOWUP,
        START,
        CLAIM,
        Do("take_prompt", {"rest": True}),  # the parked message and the new one: one is left
        cancel("user", True),
        FOLLOWUP,
        INTERRUPTED,
        CONVERGE,
    ),
    agent(
        "removing_the_latched_message_suppresses_its_replay",
        "Removing the last queued message clears the latch: nothing is replayed.",
        *RUNNING,
        cancel(),
        FOLLOWUP,
        Do("remove", {"rest": False}),
        INTERRUPTED,
        CONVERGE,
    ),
    agent(
        "turn_end_observers_and_flush_have_no_cancel_authority",
        "A turn/end observer's cancel cannot touch the completed turn: it keeps its own ending. "
        "The cancel cuts the driver's next turn instead, so the driver converges as an aborted "
        "one, to idle.",
        *RUNNING,
        retire("completed", on("publish_turn_end", "cancel", cause="user", keep_inbox=False)),
        cancel("user", True),
        CONVERGE,
    ),
    agent(
        "wake_during_flush_continues_without_publishing_idle",
        "Decision 9: work sent during the flush is run by the same driver, without idle.",
        *RUNNING,
        retire(),
        FOLLOWUP,
        CONVERGE,
        CLAIM,
    ),
    agent(
        "when_idle_does_not_resolve_if_an_idle_listener_queues_work",
        "An idle listener that queues work schedules a driver inside the idle notification, so "
        "the agent is not quiescent and when_idle() does not resolve.",
        *RUNNING,
        retire(),
        Do("converge", listen=(followup_inside("publish_status"),)),
    ),
    agent(
        "maintenance_latches_wakes_and_replays_them",
        "A wake during maintenance is latched and replayed when the task finishes.",
        Do("maintenance_start"),
        FOLLOWUP,
        Do("maintenance_finish"),
        START,
    ),
    agent(
        "disposal_aborts_with_disposed_and_never_latches",
        "Disposal aborts a live turn with the disposed interruption; work an abort observer "
        "sends is parked, never latched, and a disposed agent refuses sends.",
        *RUNNING,
        Do("dispose", listen=(followup_inside("abort_holder"),)),
        INTERRUPTED,
        CONVERGE,
        Do("scope_unwound"),
        Do("dispose_finish"),
        FOLLOWUP,
    ),
    agent(
        "cancel_then_dispose_ends_disposed_and_quiescent",
        "Decision 6: a cancel then disposal; the first cause keeps the reason, the lifecycle "
        "makes the outcome disposed.",
        *RUNNING,
        cancel(),
        Do("dispose"),
        INTERRUPTED,
        CONVERGE,
        Do("scope_unwound"),
        Do("dispose_finish"),
    ),
    agent(
        "dispose_then_cancel_ends_disposed_and_quiescent",
        "Decision 6: disposal then a cancel, which changes nothing; the outcome is disposed.",
        *RUNNING,
        Do("dispose"),
        cancel(),
        INTERRUPTED,
        CONVERGE,
        Do("scope_unwound"),
        Do("dispose_finish"),
    ),
    agent(
        "disposal_cancels_a_scheduled_driver",
        "Disposal of an idle agent with a driver scheduled: teardown (its scope first) waits "
        "for that driver, which runs nothing.",
        FOLLOWUP,
        Do("dispose"),
        Do("scope_unwound"),
        START,
        Do("scope_unwound"),
        Do("dispose_finish"),
    ),
    agent(
        "driver_events_outside_a_driver_are_refused",
        "Driver events with no driver: a claim is rejected, a start with nothing scheduled is "
        "not enabled (a runtime bug).",
        CLAIM,
        START,
    ),
    agent(
        "maintenance_needs_an_idle_agent_with_no_driver",
        "In the pre-run window the agent looks idle, but maintenance is refused.",
        FOLLOWUP,
        Do("maintenance_start"),
    ),
)


# --- activation ----------------------------------------------------------------------------------

ADMIT = Do("admit")


def dispose(flushed: bool = False) -> Do:
    return Do("dispose", {"final_state_flushed": flushed, "drain": False})


def settled(failed: bool, last: bool) -> Do:
    return Do("child_settled", {"failed": failed, "last": last})


def watch(current: bool, busy: bool, pending: bool) -> Do:
    return Do("watch", {"current": current, "busy": busy, "pending": pending})


def activation(name: str, doc: str, *steps: Do) -> Story:
    return Story(name, "activation", doc, steps)


def _verdict(name: str, children: int, current: bool, busy: bool, pending: bool) -> Story:
    return activation(
        f"settlement_watcher_{name}",
        f"The settlement watcher with {children} unsettled children, current={current}, "
        f"busy={busy}, pending={pending}.",
        *([ADMIT] * children),
        watch(current, busy, pending),
    )


ACTIVATION_STORIES = (
    activation(
        "dispose_cancels_self_then_disposes_children",
        "finishDisposal: close the inbox, cancel the own agent with the parent cause, then "
        "dispose the children.",
        ADMIT,
        ADMIT,
        dispose(),
    ),
    activation(
        "dispose_is_memoized",
        "A second dispose awaits the first: ignored, and the first caller's finalStateFlushed "
        "stands.",
        dispose(False),
        dispose(True),
    ),
    activation(
        "parent_awaits_own_idle_only_after_every_child_settled",
        "The parent awaits its own idle only once every child settled.",
        ADMIT,
        ADMIT,
        dispose(),
        Do("agent_idle"),
        settled(False, False),
        settled(False, True),
        Do("children_joined"),
        Do("agent_idle"),
        Do("final_flushed"),
    ),
    activation(
        "convergence_runs_six_steps_in_order_and_throws_last",
        "The six convergence steps run in order, and an aggregated child failure is thrown last.",
        ADMIT,
        ADMIT,
        dispose(),
        settled(True, False),
        settled(False, True),
        Do("children_joined"),
        Do("agent_idle"),
        Do("final_flushed"),
        Do("handle_disposed", {"failed": False}),
    ),
    activation(
        "natural_end_skips_the_final_flush",
        "dispose(finalStateFlushed=true): no final flush; capture, then dispose the handle.",
        dispose(True),
        Do("children_joined"),
        Do("agent_idle"),
    ),
    _verdict("ready", 0, True, False, False),
    _verdict("retry_when_not_current", 0, False, False, False),
    _verdict("retry_when_busy", 0, True, True, False),
    _verdict("wait_for_pending_work", 0, True, False, True),
    _verdict("wait_for_children", 1, True, False, False),
    activation(
        "watcher_after_close_stops",
        "Once teardown began, the watcher stops with closed.",
        dispose(),
        watch(True, False, False),
    ),
    activation(
        "drain_refuses_admission_explicitly",
        "After a drain below this parent, admission is refused with DRAINING.",
        Do("drain", {"scope": "descendants"}),
        ADMIT,
    ),
    activation(
        "registry_drain_requests_disposal",
        "drain() on the root closes admission registry-wide and requests the root's disposal.",
        Do("drain", {"scope": "registry"}),
    ),
    activation(
        "drain_children_checks_lineage",
        "drainChildren refuses a child its named parent does not own, and disposes one it does.",
        Do("drain_child", {"lineage": False}),
        Do("drain_child", {"lineage": True}),
    ),
)

STORIES: tuple[Story, ...] = (*AGENT_STORIES, *ACTIVATION_STORIES)
