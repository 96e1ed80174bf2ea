"""What a table or a model may ask of the loader before it is refused: the limit table.

The loader proves a table over its whole finite domain, and the checker builds a model's
composition, before anything can interrupt them; these limits keep that work bounded, so bad
or hostile input gets a clean :class:`~fsm_core.SpecError` naming the file, the place and the
size instead of a hang, a ``MemoryError`` or a ``RecursionError``. ``specs/README.md`` lists
them for table authors.

The three in :class:`Limits` scale with what a model explores; a model may raise them
(``[model] limits = { domain = 5_000_000 }``). The others bound the shape of the text and
hold everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_FILE_BYTES = 1 << 20
"""The largest table, model, catalogue or clause source file read, in bytes (1 MiB)."""

MAX_NESTING = 32
"""How deep TOML values may nest (tables in arrays in tables ...; nested ``when`` blocks)."""

MAX_EXPR_LENGTH = 1_000
"""The longest guard, effect, definition or invariant text, in characters."""

MAX_EXPR_DEPTH = 50
"""How deep an expression may nest, with every definition it names expanded in place."""

MAX_EXPR_NODES = 1_000
"""How many operators and operands an expression may have, definitions expanded."""

MAX_INT = 2**31 - 1
"""The largest magnitude of an integer literal, constant or range bound (a port's int32)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits a model may raise. Each counts something the loader enumerates."""

    domain: int = 1_000_000
    """Cases the loader checks to prove a table: every event, with every argument tuple,
    against each row that may take it, in every state of the domain (the shipped agent table
    has 202,752)."""

    values: int = 1_000
    """Values of one type: an enumeration, the states, an integer range, the argument tuples
    of one event."""

    tree: int = 100
    """Nodes of an activation-tree model's tree (1 + width + width^2 + ... + width^depth)."""


DEFAULT_LIMITS = Limits()
"""The limits of every table ``load_spec`` loads, and of a model that raises none."""
