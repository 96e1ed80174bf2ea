"""A loaded model: the bounded configuration a composition is built from and checked against.

:mod:`fsm_core.check._modelfile` reads these from ``models/*.toml``; the compositions
(:mod:`~._composed._agent`, :mod:`~._composed._tree`) read them, so this module
imports neither and the two can import each other's declarations without a circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, final

from fsm_core.table import Machine, Wiring

__all__ = ["Expectation", "Kind", "Model", "Verdict"]

Kind = Literal["table", "agent", "activation-tree"]
"""What a model explores: one table, an agent with its parts, or a tree of activations."""
Verdict = Literal["ok", "violation"]
"""What a check found: every property holds in every reachable state, or one fails."""


@final
@dataclass(frozen=True, slots=True)
class Expectation:
    """The result a model recorded: a test and ``fsm-core check`` compare against it."""

    states: int
    transitions: int
    depth: int
    verdict: Verdict
    property: str | None = None
    untaken: tuple[str, ...] = ()
    """Rows the model is known not to take, each said why in the model's doc (a composition
    that cannot reach them by construction); any other untaken row is a finding."""


@final
@dataclass(frozen=True, slots=True)
class Model:
    """A loaded model file, with its table compiled at the model's scale."""

    name: str
    file: str
    doc: str
    kind: Kind
    tier: Literal["default", "bench"]
    machine: Machine
    budgets: Mapping[str, int] = field(default_factory=dict)
    reactions: tuple[str, ...] = ()
    depth: int = 0
    width: int = 0
    failures: int = 0
    door: Machine | None = None
    """An ``activation-tree`` model's door: the registry's admission table (``[tree] door``)."""
    wiring: Wiring | None = None
    """An ``activation-tree`` model's connections (its ``[tree] wiring``)."""
    agent: Machine | None = None
    """The agent table each node of an ``activation-tree`` carries (``[tree] agents``)."""
    symmetry: bool = False
    """True iff an ``activation-tree`` is searched over sibling orbits (``[tree] symmetry``):
    each parent's admitted children in one canonical order (:mod:`~._composed._symmetry`)."""
    unreacted: Mapping[str, str] = field(default_factory=dict)
    """Notifying effects nothing re-enters in this model, each with the file's reason
    (``[environment] unreacted``; see :mod:`fsm_core.check._reentry`)."""
    expect: Expectation | None = None
