"""``[environment] reactions``, read in one place: which notifying effects a model lets
listeners into, by the table whose effect each is.

A model names an effect bare (``publish_status``: the listened instance's own, the agent's in
an agent model or a tree with agents, the table's in any other model) or, in a tree,
``MACHINE.EFFECT`` (``activation.settle``: a node's notification, whose listeners call other
instances as the wiring's ``[[listeners]]`` declare). The model loader validates the names with
:func:`split`; the compositions, the reaction coverage and the vector tools read them with
:func:`listened`.
"""

from __future__ import annotations

from fsm_core.check._config import Model

__all__ = ["listened", "split"]


def split(name: str) -> tuple[str | None, str]:
    """``MACHINE.EFFECT`` as ``(MACHINE, EFFECT)``; a bare ``EFFECT`` as ``(None, EFFECT)``."""
    machine, dot, effect = name.partition(".")
    return (machine, effect) if dot else (None, name)


def listened(model: Model, machine: str) -> frozenset[str]:
    """The effects of the table named ``machine`` inside which ``model``'s listeners call: the
    ones ``reactions`` names ``MACHINE.EFFECT`` and, for the listened instance's own table (a
    node's agent, else the model's one table), the ones it names bare."""
    own = (model.agent or model.machine).table.name
    return frozenset(e for m, e in map(split, model.reactions) if (m or own) == machine)
