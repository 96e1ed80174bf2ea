"""Structured edits of a table's parsed rows, and the TOML writer that puts an edited table back.

A spec mutant (:mod:`fsm_core.tools._mutants`) plants its bug with a few of these edits on the
table as :mod:`tomllib` parses it, never on its text, so a comment or a line break moved in the
table cannot break a mutant, while a change to what the mutant edits does::

    data = tomllib.loads(text)
    apply_edits([Move("retire.ended", "publish_turn_end(end)", before="holder := none")], data)

Each edit names its row by ``id`` and the ``do`` entries it touches by their exact value: a
statement's text, or a whole :class:`Block`. An edit that finds no such row, entry, ``guard`` or
``to`` raises :class:`StaleEdit` saying which, instead of testing something else.

The vocabulary is the smallest that expresses the catalogue: :class:`Set` a row's ``guard`` or
``to``; :class:`Insert`, :class:`Remove`, :class:`Replace` or :class:`Move` entries of its
``do``; :class:`AddRow` a new row, :class:`Unignore` an event an ``[[ignored]]`` (or
``[[rejected]]``) entry lists, so the new row may take it, and :class:`DropEffect` an effect
no row performs any more, as someone deleting what looks unused would. specs/wiring.toml's
connections are edited the same way, by call ``id``: :class:`DropCall`, :class:`SetCall` (its
target, event, refusal, effect or an argument) and :class:`MoveCall`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fsm_core._errors import echo


class StaleEdit(Exception):
    """An edit does not match the table it edits: its row or entry is gone or has changed."""


@dataclass(frozen=True, slots=True)
class Block:
    """A ``{ when, do }`` entry of a row's ``do``, as an entry to find or to put."""

    when: str
    do: tuple[Entry, ...]

    def data(self) -> dict[str, Any]:
        """The entry as :mod:`tomllib` parses it."""
        return {"when": self.when, "do": [_data(e) for e in self.do]}


Entry = str | Block
"""One entry of a row's ``do``: a statement's text, or a block."""


def _data(entry: Entry) -> object:
    return entry.data() if isinstance(entry, Block) else entry


@dataclass(frozen=True, slots=True)
class Set:
    """Set the row's ``key`` (``guard`` or ``to``) from ``old`` to ``new``; None removes it."""

    row: str
    key: str
    old: str
    new: str | None

    def apply(self, data: dict[str, Any]) -> None:
        row = _row(data, self.row)
        if row.get(self.key) != self.old:
            raise StaleEdit(f"row {echo(self.row)} has no {self.key} {echo(self.old)}")
        if self.new is None:
            del row[self.key]
        else:
            row[self.key] = self.new


@dataclass(frozen=True, slots=True)
class Insert:
    """Put ``entry`` in the row's ``do`` just ``before`` or ``after`` an entry (one of the two)."""

    row: str
    entry: Entry
    before: Entry | None = None
    after: Entry | None = None

    def apply(self, data: dict[str, Any]) -> None:
        do = _do(data, self.row)
        do.insert(_position(self.row, do, self.before, self.after), _data(self.entry))


@dataclass(frozen=True, slots=True)
class Remove:
    """Take ``entries`` out of the row's ``do``."""

    row: str
    entries: tuple[Entry, ...]

    def __init__(self, row: str, *entries: Entry) -> None:
        object.__setattr__(self, "row", row)
        object.__setattr__(self, "entries", entries)

    def apply(self, data: dict[str, Any]) -> None:
        do = _do(data, self.row)
        for entry in self.entries:
            del do[_index(self.row, do, entry)]


@dataclass(frozen=True, slots=True)
class Replace:
    """Put ``by`` (one entry or several) where ``entry`` stands in the row's ``do``."""

    row: str
    entry: Entry
    by: tuple[Entry, ...]

    def __init__(self, row: str, entry: Entry, *by: Entry) -> None:
        object.__setattr__(self, "row", row)
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "by", by)

    def apply(self, data: dict[str, Any]) -> None:
        do = _do(data, self.row)
        at = _index(self.row, do, self.entry)
        do[at : at + 1] = [_data(e) for e in self.by]


@dataclass(frozen=True, slots=True)
class Move:
    """Move ``entries``, in their order, to just ``before`` or ``after`` an entry of the row's
    ``do`` that stays (one of the two)."""

    row: str
    entries: tuple[Entry, ...]
    before: Entry | None
    after: Entry | None

    def __init__(
        self, row: str, *entries: Entry, before: Entry | None = None, after: Entry | None = None
    ) -> None:
        object.__setattr__(self, "row", row)
        object.__setattr__(self, "entries", entries)
        object.__setattr__(self, "before", before)
        object.__setattr__(self, "after", after)

    def apply(self, data: dict[str, Any]) -> None:
        do = _do(data, self.row)
        for entry in self.entries:
            del do[_index(self.row, do, entry)]
        at = _position(self.row, do, self.before, self.after)
        do[at:at] = [_data(e) for e in self.entries]


@dataclass(frozen=True, slots=True)
class AddRow:
    """Append a new row, written as the TOML of one ``[[rows]]`` entry."""

    toml: str

    def apply(self, data: dict[str, Any]) -> None:
        row = tomllib.loads(self.toml)
        if any(r.get("id") == row["id"] for r in data["rows"]):
            raise StaleEdit(f"a row {echo(row['id'])} exists already")
        data["rows"].append(row)


@dataclass(frozen=True, slots=True)
class DropRow:
    """Delete the row ``row``."""

    row: str

    def apply(self, data: dict[str, Any]) -> None:
        data["rows"].remove(_row(data, self.row))


@dataclass(frozen=True, slots=True)
class Unignore:
    """Drop ``event`` from the one ``[[ignored]]`` entry (or ``[[rejected]]``, by ``kind``)
    that lists it."""

    event: str
    kind: str = "ignored"

    def apply(self, data: dict[str, Any]) -> None:
        listing = [i for i in data.get(self.kind, []) if self.event in i["on"]]
        if len(listing) != 1:
            raise StaleEdit(
                f"{len(listing)} [[{self.kind}]] entries list {echo(self.event)}, not exactly one"
            )
        listing[0]["on"].remove(self.event)


@dataclass(frozen=True, slots=True)
class DropEffect:
    """Delete the declaration of ``effect`` (``[effects.NAME]``)."""

    effect: str

    def apply(self, data: dict[str, Any]) -> None:
        effects = data.get("effects", {})
        if self.effect not in effects:
            raise StaleEdit(f"no effect {echo(self.effect)}")
        del effects[self.effect]


@dataclass(frozen=True, slots=True)
class DropCall:
    """Delete the wiring's ``[[calls]]`` entry ``call`` (specs/wiring.toml): a connection lost."""

    call: str

    def apply(self, data: dict[str, Any]) -> None:
        calls = data.get("calls", [])
        kept = [c for c in calls if c.get("id") != self.call]
        if len(kept) != len(calls) - 1:
            raise StaleEdit(f"no call {echo(self.call)}")
        data["calls"] = kept


@dataclass(frozen=True, slots=True)
class SetCall:
    """Set the wiring call's ``key`` (``target``, ``event``, ``refused``, ``only``, ``effect``
    (the call made by another effect, earlier or later), or ``args.PARAM``) from ``old`` to
    ``new``; None removes it."""

    call: str
    key: str
    old: str | None
    new: str | None

    def apply(self, data: dict[str, Any]) -> None:
        found = [c for c in data.get("calls", []) if c.get("id") == self.call]
        if len(found) != 1:
            raise StaleEdit(f"no call {echo(self.call)}")
        where, key = found[0], self.key
        if key.startswith("args."):
            where, key = where.setdefault("args", {}), key[len("args.") :]
        if where.get(key) != self.old:
            raise StaleEdit(f"call {echo(self.call)} has no {self.key} {echo(self.old)}")
        if self.new is None:
            del where[key]
        else:
            where[key] = self.new


@dataclass(frozen=True, slots=True)
class MoveCall:
    """Move the wiring's ``[[calls]]`` entry ``call`` just before ``before``: two calls of one
    effect made in the other order."""

    call: str
    before: str

    def apply(self, data: dict[str, Any]) -> None:
        calls = data.get("calls", [])
        ids = [c.get("id") for c in calls]
        for name in (self.call, self.before):
            if ids.count(name) != 1:
                raise StaleEdit(f"no call {echo(name)}")
        moved = calls.pop(ids.index(self.call))
        calls.insert([c.get("id") for c in calls].index(self.before), moved)


Edit = (
    Set | Insert | Remove | Replace | Move | AddRow | DropRow | Unignore | DropEffect
    | DropCall | SetCall | MoveCall
)  # fmt: skip


def apply_edits(edits: Iterable[Edit], data: dict[str, Any]) -> None:
    """Make ``edits``, in order, on a table's parsed ``data`` (changed in place)."""
    for edit in edits:
        edit.apply(data)


def _row(data: Mapping[str, Any], row: str) -> dict[str, Any]:
    for r in data.get("rows", []):
        if r.get("id") == row:
            found: dict[str, Any] = r
            return found
    raise StaleEdit(f"no row {echo(row)}")


def _do(data: Mapping[str, Any], row: str) -> list[Any]:
    do = _row(data, row).get("do")
    if not isinstance(do, list):
        raise StaleEdit(f"row {echo(row)} has no do")
    return do


def _index(row: str, do: list[Any], entry: Entry) -> int:
    found = _data(entry)
    count = do.count(found)
    if count != 1:
        what = echo(found) if isinstance(found, str) else repr(found)
        many = f"has {count} do entries {what}, not one" if count else f"has no do entry {what}"
        raise StaleEdit(f"row {echo(row)} {many}")
    return do.index(found)


def _position(row: str, do: list[Any], before: Entry | None, after: Entry | None) -> int:
    """The index just before ``before`` or just after ``after`` in ``do``."""
    if (before is None) == (after is None):
        raise TypeError("give exactly one of before= and after=")
    if before is not None:
        return _index(row, do, before)
    assert after is not None
    return _index(row, do, after) + 1


# --- writing a table back ------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dump_toml(data: Mapping[str, Any]) -> str:
    """``data`` as TOML that :mod:`tomllib` reads back equal, one key of a section a line.

    Only what tables hold is written (tables, arrays, strings, booleans and integers): each
    top-level table as a ``[section]`` and each array of tables as ``[[section]]`` entries,
    their keys one a line with values inline (other top-level keys first). The checker loads
    tables from files, and an edited table only has to read back as the same data, not as the
    same text; a key a line lets a fault's line in it be traced back to the key (see
    :func:`fsm_core.tools._mutants.Planted.cite_table`).
    """
    out = [f"{_key(k)} = {_value(v)}\n" for k, v in data.items() if _inline(v)]
    for k, v in data.items():
        if isinstance(v, dict):
            out.append(f"\n[{_key(k)}]\n")
            out.extend(f"{_key(key)} = {_value(value)}\n" for key, value in v.items())
        elif not _inline(v):
            for entry in v:
                out.append(f"\n[[{_key(k)}]]\n")
                out.extend(f"{_key(key)} = {_value(value)}\n" for key, value in entry.items())
    return "".join(out)


def _inline(value: object) -> bool:
    """True iff a top-level ``value`` is written on its key's line: neither a table nor a
    non-empty array of tables."""
    if isinstance(value, dict):
        return False
    return not (isinstance(value, list) and value and all(isinstance(v, dict) for v in value))


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # \uXXXX is valid TOML for every character a basic string may not hold as itself.
    escaped = (c if c >= " " and c not in '"\\\x7f' else f"\\u{ord(c):04x}" for c in text)
    return '"' + "".join(escaped) + '"'


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for a table value of type {type(value).__name__}")


__all__ = [
    "AddRow",
    "Block",
    "DropCall",
    "DropEffect",
    "Edit",
    "Entry",
    "Insert",
    "Move",
    "MoveCall",
    "Remove",
    "Replace",
    "Set",
    "SetCall",
    "StaleEdit",
    "Unignore",
    "apply_edits",
    "dump_toml",
]
