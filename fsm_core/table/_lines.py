"""Where each key of a TOML file is written: the line numbers a fault names.

:mod:`tomllib` keeps no positions, so :func:`key_lines` reads the text again, as far as it
must to know where each table and key starts: headers (``[events.cancel]``, the ``N``-th
``[[rows]]``), keys (bare, quoted or dotted) and, to skip them, strings and values that span
lines (multi-line strings and arrays, inline tables). It runs only on text :mod:`tomllib`
has already accepted, so it never has to judge what is valid TOML::

    lines = key_lines('[[rows]]\\nid = "a"\\n\\n[[rows]]\\nid = "b"\\nguard = "x"\\n')
    assert lines[("rows", 1, "guard")] == 6

A path names a table by its keys and an array of tables' entry by its index; a key inside an
inline table is not looked into: :func:`line_of` falls back to the nearest enclosing path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

__all__ = ["Path", "key_lines", "line_of"]

Path = tuple[str | int, ...]
"""A place in a TOML document: table names and keys, and an ``[[array]]`` entry's index."""

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def key_lines(text: str) -> dict[Path, int]:
    """The line (from 1) where each table, array entry and key of ``text`` is written."""
    lines: dict[Path, int] = {}
    entries: dict[Path, int] = {}
    table: Path = ()
    depth = 0  # open brackets and braces of a value spanning lines
    string = ""  # the delimiter of a multi-line string left open at a line's end
    # Lines end at "\n" (a "\r" before it is stripped) and nowhere else: splitlines() also
    # breaks at U+2028, U+0085 and the like, which a TOML string or comment may hold.
    for number, line in enumerate((x.removesuffix("\r") for x in text.split("\n")), start=1):
        rest = line
        if not string and depth == 0:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("["):
                many = stripped.startswith("[[")
                keys, _ = _keys(stripped[2 if many else 1 :])
                if many:
                    index = entries.get(keys, 0)
                    entries[keys] = index + 1
                    table = (*keys, index)
                else:
                    table = keys
                for i in range(1, len(table) + 1):
                    lines.setdefault(table[:i], number)
                continue
            keys, rest = _keys(stripped)
            for i in range(1, len(keys) + 1):
                lines.setdefault((*table, *keys[:i]), number)
            rest = rest.lstrip()[1:]  # past the '='
        depth, string = _scan(rest, depth, string)
    return lines


def line_of(lines: Mapping[Path, int], path: Path) -> int | None:
    """The line of ``path``, or of the nearest enclosing path written in the file."""
    for i in range(len(path), 0, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return None


def _keys(text: str) -> tuple[tuple[str, ...], str]:
    """The dotted key at the start of ``text`` and what follows it."""
    keys: list[str] = []
    rest = text.lstrip()
    while rest:
        if rest[0] == '"':
            end = _closing(rest, 1, '"')
            keys.append(json.loads(rest[: end + 1]))
            rest = rest[end + 1 :]
        elif rest[0] == "'":
            end = rest.index("'", 1)
            keys.append(rest[1:end])
            rest = rest[end + 1 :]
        else:
            m = _BARE.match(rest)
            if m is None:
                break
            keys.append(m[0])
            rest = rest[m.end() :]
        rest = rest.lstrip()
        if not rest.startswith("."):
            break
        rest = rest[1:].lstrip()
    return tuple(keys), rest


def _closing(text: str, start: int, quote: str) -> int:
    """The index of the ``quote`` that closes a basic string opened before ``start``."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return len(text)


def _scan(text: str, depth: int, string: str) -> tuple[int, str]:
    """The bracket depth and open multi-line string after ``text``, starting from the given."""
    i = 0
    while i < len(text):
        if string:
            end = text.find(string, i) if string == "'''" else _closing3(text, i)
            if end < 0:
                return depth, string
            i, string = end + 3, ""
            continue
        c = text[i]
        if c == "#":
            break
        if text.startswith(('"""', "'''"), i):
            string, i = text[i : i + 3], i + 3
        elif c == '"':
            i = _closing(text, i + 1, '"') + 1
        elif c == "'":
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end + 1
        else:
            if c in "[{":
                depth += 1
            elif c in "]}":
                depth -= 1
            i += 1
    return depth, string


def _closing3(text: str, start: int) -> int:
    """The index of the ``\"\"\"`` that closes a multi-line basic string, or -1."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith('"""', i):
            return i
        i += 1
    return -1
