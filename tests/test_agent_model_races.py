"""The default agent model reaches every race seed 000 names for the runtime's race tests:
idle cancellation, pre-run cancellation, a replacement submitted from a running listener,
repeated (first-wins) cancellation, and cancel versus dispose. A model whose budgets or
reactions are too small to reach one of them proves nothing about it, however green it is.

Each race is a predicate over one step: the state it is taken from and its move, with the
listener calls inside it. The test searches the model and asserts every predicate holds of
some reachable step, so a smaller model (or a table change that closes a race's path) fails
it by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from fsm_core._paths import models_dir
from fsm_core.check import Model, load_model
from fsm_core.check._explore import explore
from fsm_core.check._moves import Move
from fsm_core.check._system import build
from tests.helpers import copy_specs

State = Mapping[str, Any]


def calls(move: Move) -> Iterator[Move]:
    """``move`` and every call made inside it, outermost first, in the order they ran."""
    yield move
    for _, nested in move.inside:
        yield from calls(nested)


def idle_cancel(state: State, move: Move) -> bool:
    """A user cancels an idle agent with no driver scheduled: no holder, nothing armed."""
    return (
        move.event == "cancel"
        and state["phase"] == "idle"
        and not state["scheduled"]
        and move.row in ("cancel.noop", "cancel.discard")
    )


def prerun_cancel(state: State, move: Move) -> bool:
    """Queued work is cancelled before a turn claims it: the driver keeps a pre-run marker."""
    return any(m.row == "cancel.prerun" for m in calls(move))


def replacement_from_listener(state: State, move: Move) -> bool:
    """A listener of a running turn cancels it and sends a replacement (a waking send), both
    inside one step the driver or the user began."""
    inner = list(calls(move))[1:]
    cancelled = next((k for k, m in enumerate(inner) if m.row == "cancel.turn"), None)
    return (
        state["phase"] == "running"
        and move.event != "cancel"
        and cancelled is not None
        and any(
            m.event == "send" and m.row and dict(m.args)["wake"] for m in inner[cancelled + 1 :]
        )
    )


def repeated_cancel(state: State, move: Move) -> bool:
    """A cancel reaches a turn another cancel already stopped: the first reason wins."""
    return (state["phase"] == "cancelling" and move.row == "cancel.turn") or sum(
        m.row == "cancel.turn" for m in calls(move)
    ) >= 2


def cancel_versus_dispose(state: State, move: Move) -> bool:
    """Disposal meets a cancel of a live turn: one runs inside the other's notifications, or
    disposal begins while the cancelled turn is still converging."""
    rows = [m.row or "" for m in calls(move)]
    disposes = any(r.startswith("dispose.") and r != "dispose.finish" for r in rows)
    return (disposes and "cancel.turn" in rows) or (
        disposes and move.event == "dispose" and state["phase"] == "cancelling"
    )


RACES: dict[str, Callable[[State, Move], bool]] = {
    "idle cancellation": idle_cancel,
    "pre-run cancellation": prerun_cancel,
    "replacement submitted from a running listener": replacement_from_listener,
    "repeated cancellation (first-wins)": repeated_cancel,
    "cancel versus dispose": cancel_versus_dispose,
}


def unreached(model: Model) -> list[str]:
    """The races no step ``model`` reaches is an instance of, in :data:`RACES` order."""
    built = build(model)
    system = built.system
    assert system.unpack is not None
    result = explore(system)
    assert result.complete and result.violation is None
    missing = dict(RACES)
    for packed in result.parent:
        state = dict(zip(built.names, cast(tuple[Any, ...], system.unpack(packed)), strict=True))
        for label in {label for label, _ in system.successors(packed)}:
            for name, race in list(missing.items()):
                if race(state, built.moves[label]):
                    del missing[name]
        if not missing:
            break
    return list(missing)


def test_the_default_agent_model_reaches_every_seed_race() -> None:
    assert unreached(load_model(models_dir() / "agent_races.toml")) == []


def test_an_agent_model_without_listeners_in_a_running_turn_misses_the_replacement(
    tmp_path: Path,
) -> None:
    """The predicates are not vacuous: with listeners only inside ``enqueue`` and disposal,
    no listener of a running turn cancels it, so no replacement is sent from one."""
    copy_specs(tmp_path)
    text = (models_dir() / "agent_races.toml").read_text()
    start = text.index("reactions = [")
    end = text.index("]", start) + 1
    narrowed = text[:start] + 'reactions = ["enqueue", "publish_disposing"]' + text[end:]
    narrowed = narrowed[: narrowed.index("[expect]")]
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "agent_races.toml").write_text(narrowed)
    missing = unreached(load_model(tmp_path / "models" / "agent_races.toml"))
    assert "replacement submitted from a running listener" in missing
