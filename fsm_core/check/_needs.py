"""What a model kind's composition reads from its table by name.

``kind = "agent"`` composes a table with a user and re-entrant listeners whose ghosts read
variables and event arguments by name; ``kind = "activation-tree"`` fires events and wires
effects between nodes with arguments it builds itself. A table of another kind lacks some
of them, and the composition would fail mid-check, so the model loader checks the table
against its kind's :class:`Needs` first and names the first thing it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fsm_core.table._table import Table


@dataclass(frozen=True, slots=True)
class Needs:
    """The variables, events and effects a composition reads, all boolean-valued."""

    variables: tuple[str, ...] = ()
    """Boolean variables it reads."""
    events: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Events it fires or reads, with the boolean parameters it reads or passes."""
    effects: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Effects it wires, with the boolean parameters it reads."""
    by_position: bool = False
    """True iff it passes arguments by position: the parameters listed are then all of the
    event's or effect's parameters, in their order."""

    def lacking(self, t: Table) -> str | None:
        """The first need ``t`` does not meet, as ``a boolean variable closing``; else None."""
        types = {v.name: v.type for v in t.variables}
        for name in self.variables:
            if name not in types or types[name].kind != "bool":
                return f"a boolean variable {name}"
        kinds = (("event", self.events, t.events), ("effect", self.effects, t.effects))
        for what, needed, declared in kinds:
            for name, params in needed.items():
                spec = declared.get(name)
                have = dict(spec.params) if spec is not None else {}
                if (
                    spec is None
                    or any(p not in have or have[p].kind != "bool" for p in params)
                    or (self.by_position and tuple(have) != params)
                ):
                    shown = [f"{p}: bool" for p in params]
                    if not self.by_position:
                        shown.append("...")
                    return f"an {what} {name}({', '.join(shown)})"
        return None
