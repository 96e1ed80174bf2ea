"""Reaction coverage: which notifying effects a model re-enters, and which it leaves alone.

A notifying effect (``notifies = true``) is a point where listeners run inside a row and may
call back in. A model proves what happens there only if something re-enters it: listeners
(the model's ``[environment] reactions``) or, in a tree, the wiring's calls fired inside it
(``notify_parent`` telling the parent). A notifying effect nothing re-enters is a reaction
point the model abstracts away, so whatever a listener could break there is proved nowhere:
the checker reports it as a finding, like a row never taken, unless the model file says why
it leaves it (``[environment] unreacted = { EFFECT = "why" }``).

Naming an effect in ``reactions`` is not enough: after a complete search that found no
violation, an effect no step made a call inside (a model whose budgets never reach it, or
leave no call to make there) is a finding of its own, *unreached*. After a search cut short
or stopped by a violation, the listing alone counts: the steps not explored might have
reached it. Any call counts: the check says a listener re-entered the effect, not that every
call a listener could make there was tried (the model's budgets say which calls exist).

In a tree model the effects are named ``MACHINE.EFFECT`` (``activation.settle``,
``agent.publish_status``): the node's table, the door's and the agents' have one namespace
each. In any other model they are named bare, as ``reactions`` names them.
"""

from __future__ import annotations

from collections.abc import Iterable

from fsm_core.check._composed._tree import AGENT, DOOR
from fsm_core.check._config import Model
from fsm_core.check._moves import Move
from fsm_core.check._reactions import listened
from fsm_core.table import Machine

__all__ = ["notification_points", "reentered", "unreached", "unreacted"]


def _qualified(model: Model) -> bool:
    return model.kind == "activation-tree"


def _machines(model: Model) -> tuple[Machine, ...]:
    found = [model.machine]
    if model.door is not None:
        found.append(model.door)
    if model.agent is not None:
        found.append(model.agent)
    return tuple(found)


def notification_points(model: Model) -> dict[str, str]:
    """Every notifying effect of the model's tables, by name, with what re-enters it there:
    ``"listeners"``, ``"wiring"``, ``"listeners and wiring"``, or ``""`` for nothing."""
    points: dict[str, str] = {}
    for m in _machines(model):
        machine = m.table.name
        heard = listened(model, machine)
        wired = model.wiring.effects(machine) if model.wiring is not None else frozenset()
        for effect, spec in m.table.effects.items():
            if not spec.notifies:
                continue
            how = [w for w, by in (("listeners", heard), ("wiring", wired)) if effect in by]
            name = f"{machine}.{effect}" if _qualified(model) else effect
            points[name] = " and ".join(how)
    return points


def reentered(model: Model, moves: Iterable[Move]) -> frozenset[str]:
    """The notifying effects some call was made inside, in ``moves`` (a search's taken
    moves), named as :func:`notification_points` names them."""
    found: set[str] = set()

    def walk(move: Move) -> None:
        machine = _machine_of(model, move.instance)
        for effect, nested in move.inside:
            name = effect.split("(", 1)[0]
            found.add(f"{machine}.{name}" if _qualified(model) else name)
            walk(nested)

    for move in moves:
        walk(move)
    return frozenset(found)


def _machine_of(model: Model, instance: str) -> str:
    """The table an instance of ``model`` runs, by the instance's name in a move."""
    if model.kind != "activation-tree":
        return model.machine.table.name
    if instance == DOOR and model.door is not None:
        return model.door.table.name
    if instance.endswith(AGENT) and model.agent is not None:
        return model.agent.table.name
    return model.machine.table.name


def unreacted(model: Model) -> tuple[str, ...]:
    """The notifying effects no listener and no wiring call re-enters in ``model`` and its
    file does not excuse, in table order: each is a finding."""
    return tuple(
        name
        for name, how in notification_points(model).items()
        if not how and name not in model.unreacted
    )


def unreached(model: Model, taken: Iterable[Move]) -> tuple[str, ...]:
    """The notifying effects ``model`` re-enters (its reactions name them, or the wiring
    calls inside them) inside which no move of ``taken`` made a call, in table order: each is
    a finding. ``taken`` is a complete search's moves: those of a search cut short prove
    nothing unreached."""
    calls = reentered(model, taken)
    return tuple(
        name for name, how in notification_points(model).items() if how and name not in calls
    )
