"""What a table or a model may ask of the loader before it is refused: the limit table.

The loader proves a table over its whole finite domain, and the checker builds a model's
composition, before anything can interrupt them; these limits keep that work bounded, so bad
or hostile input gets a clean :class:`~fsm_core.SpecError` naming the file, the place and the
size instead of a hang, a ``MemoryError`` or a ``RecursionError``. ``specs/README.md`` lists
them for table authors.
"""

from __future__ import annotations

MAX_FILE_BYTES = 1 << 20
"""The largest table, model, catalogue or clause source file read, in bytes (1 MiB)."""

MAX_NESTING = 32
"""How deep TOML values may nest (tables in arrays in tables ...; nested ``when`` blocks)."""
