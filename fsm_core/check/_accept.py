"""``fsm-core check --accept``: record what a check found as its model's new ``[expect]``.

After a deliberate change (a larger budget, a new row), a model's numbers change and
``[expect]`` no longer matches. As a snapshot tool accepts a new snapshot, :func:`accept`
rewrites the ``[expect]`` table of the model file with the report's numbers::

    line = accept(report, Path("models/my_agent.toml"))   # "states 24 -> 25, ..."

Only the values of ``states``, ``transitions``, ``depth`` and ``verdict`` change (and a
``property`` line goes when the verdict becomes ``ok``); every other byte of the file (its
comments, its layout, ``untaken``) stays as it was. A file without ``[expect]`` gets one at
its end. The rewrite is proven before it is written: the new text, read as TOML, must hold
the new ``[expect]`` and everything else exactly as before, or nothing is written.

A model with a violation, or one whose search was cut short, is refused: its numbers prove
nothing worth recording.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from fsm_core._errors import FsmError
from fsm_core._files import write_whole
from fsm_core.check._check import Report

__all__ = ["AcceptRefused", "accept"]

_KEYS = ("states", "transitions", "depth", "verdict")
_HEADER = re.compile(r"^[ \t]*\[[ \t]*(?P<name>[^\[\]]*?)[ \t]*\][ \t]*(#.*)?$")
"""A ``[table]`` header line (an ``[[array]]`` one does not match: see :data:`_ANY_HEADER`)."""
_ANY_HEADER = re.compile(r"^[ \t]*\[")
_VALUE = r'-?[0-9_]+|"[^"\\\n]*"|\'[^\'\n]*\''
"""A number or a one-line string: the values the rewritten keys take."""


class AcceptRefused(FsmError):
    """``--accept`` cannot record this model's result: the message says why."""


def accept(report: Report, path: Path) -> str:
    """Rewrite the ``[expect]`` of the model file at ``path`` (``report``'s model) with
    ``report``'s numbers, and say what changed, as ``NAME (FILE): states 24 -> 25``.

    Raises :class:`AcceptRefused` for a violation, an incomplete search, or an ``[expect]``
    written in a form this rewriter does not take (an inline table, dotted keys)."""
    model = report.model
    where = f"{model.name} ({model.file})"
    if report.violation is not None:
        raise AcceptRefused(
            f"{where}: {report.violation.name} is violated; a model that does not hold is "
            "fixed, not accepted"
        )
    if not report.result.complete:
        raise AcceptRefused(f"{where}: the search was cut short; nothing is proven")
    found: dict[str, int | str] = {
        "states": report.result.states,
        "transitions": report.result.transitions,
        "depth": report.result.depth,
        "verdict": "ok",
    }
    with path.open(encoding="utf-8", newline="") as f:  # newline="": CRLF stays CRLF
        text = f.read()
    old = tomllib.loads(text)
    before = old.get("expect")
    new_text = _rewritten(text, found, where) if before is not None else _appended(text, found)
    try:
        new = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError:  # a value spanning lines, say: not rewritten in place
        raise AcceptRefused(f"{where}: {_BY_HAND}") from None
    expected = {**(before or {}), **found}
    expected.pop("property", None)
    if new.get("expect") != expected or {k: v for k, v in new.items() if k != "expect"} != {
        k: v for k, v in old.items() if k != "expect"
    }:
        raise AcceptRefused(f"{where}: {_BY_HAND}")
    if new_text == text:
        return f"{where}: [expect] unchanged"
    write_whole(path, new_text)
    if before is None:
        shown = ", ".join(f"{k} = {_toml(v)}" for k, v in found.items())
        return f"{where}: [expect] added: {shown}"
    changes = [
        f"{k} {_toml(before.get(k))} -> {_toml(v)}" for k, v in found.items() if before.get(k) != v
    ]
    if "property" in before:
        changes.append(f"property {_toml(before['property'])} dropped")
    return f"{where}: [expect] {', '.join(changes)}"


_BY_HAND = (
    "[expect] is not written as a [expect] table with one key per line; edit it by hand "
    "(fsm-core check prints the numbers found)"
)


def _rewritten(text: str, found: dict[str, int | str], where: str) -> str:
    """``text`` with the values of ``found``'s keys replaced inside its ``[expect]`` table."""
    # Lines end at "\n" alone: splitlines() also breaks at U+2028 and the like, which a TOML
    # string or comment may hold.
    lines = [line for line in re.split(r"(?<=\n)", text) if line]
    start = next(
        (i for i, line in enumerate(lines) if (m := _HEADER.match(line)) and m["name"] == "expect"),
        None,
    )
    if start is None:
        raise AcceptRefused(f"{where}: {_BY_HAND}")
    end = next((i for i in range(start + 1, len(lines)) if _ANY_HEADER.match(lines[i])), len(lines))
    seen: set[str] = set()
    out = lines[: start + 1]
    for line in lines[start + 1 : end]:
        key = re.match(r"[ \t]*(\w+)[ \t]*=", line)
        name = key[1] if key else None
        if name == "property":
            continue  # a recorded verdict is ok: it names no property
        if name in found:
            value = re.compile(rf"^([ \t]*{name}[ \t]*=[ \t]*)({_VALUE})([ \t]*(#.*)?\r?\n?)$")
            m = value.match(line)
            if m is None:
                raise AcceptRefused(f"{where}: {_BY_HAND}")
            out.append(f"{m[1]}{_toml(found[name])}{m[3]}")
            seen.add(name)
            continue
        out.append(line)
    if seen != set(found):
        raise AcceptRefused(f"{where}: {_BY_HAND}")
    return "".join(out + lines[end:])


def _appended(text: str, found: dict[str, int | str]) -> str:
    """``text`` with an ``[expect]`` table holding ``found`` added at its end."""
    body = "".join(f"{k} = {_toml(v)}\n" for k, v in found.items())
    gap = "\n\n"  # a blank line before the new table, as between the others
    if not text or text.endswith("\n\n"):
        gap = ""
    elif text.endswith("\n"):
        gap = "\n"
    return f"{text}{gap}[expect]\n{body}"


def _toml(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)
