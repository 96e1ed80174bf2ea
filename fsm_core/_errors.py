"""The error hierarchy: one root, a table error, and the two ways a transition can fail."""

from __future__ import annotations

import difflib
import math
import reprlib
from collections.abc import Iterable, Sequence
from typing import final

__all__ = ["FsmError", "NotEnabled", "Rejected", "SpecError", "TransitionError", "UsageError"]

ECHO_LIMIT = 80
"""The most characters of input an error message quotes (see :func:`echo`)."""


class _Echo(reprlib.Repr):
    """``reprlib`` bounds strings, containers and nesting; an integer too long to convert to
    text (over 4,300 digits) is described instead of printed."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 2
        self.maxstring = ECHO_LIMIT
        self.maxother = ECHO_LIMIT

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 256:
            digits = math.floor(x.bit_length() * math.log10(2)) + 1
            return f"<an integer of about {digits} digits>"
        return super().repr_int(x, level)


_ECHO = _Echo()


def echo(value: object) -> str:
    """``value`` as an error message may quote it: repr-style and at most ``ECHO_LIMIT`` long.

    Every fault that quotes input (a name, an id, an expression, a value from a file) goes
    through here. ``repr`` escapes every non-printable character, so a file's terminal escape
    sequence is shown as text (the ESC character as the four characters ``\\x1b``), and a
    10 MB string gives an 80-character quote ending in ``...``.
    """
    text = _ECHO.repr(value)
    return text if len(text) <= ECHO_LIMIT else text[: ECHO_LIMIT - 3] + "..."


def named(text: str, limit: int = ECHO_LIMIT) -> str:
    """A name or path as a message shows it: as it is when printable and at most ``limit``
    characters long, else by :func:`echo`."""
    return text if len(text) <= limit and text.isprintable() else echo(text)


def shown(text: str, limit: int) -> str:
    """``text`` as a terminal or CI log may show it: every character that is not printable (ESC,
    a newline, a bidi override) written as its Python escape (``\\x1b``), and at most ``limit``
    characters, the cut ones replaced by ``...``."""
    head = text[: limit + 1]
    if not head.isprintable():
        head = "".join(c if c.isprintable() else repr(c)[1:-1] for c in head)
    return head if len(head) <= limit else head[: limit - 3] + "..."


def known(names: Iterable[str | int]) -> str:
    """The names a message offers instead (``idle, busy, stopping``), cut with ``...`` after
    ``3 * ECHO_LIMIT`` characters; a name that is not plain printable text is shown by
    :func:`echo`."""
    parts: list[str] = []
    length = 0
    for name in names:
        text = named(name) if isinstance(name, str) else echo(name)
        if length + len(text) > 3 * ECHO_LIMIT:
            parts.append("...")
            break
        parts.append(text)
        length += len(text) + 2
    return ", ".join(parts)


SHOWN_FAULTS = 20
"""The most faults a :class:`SpecError`'s message lists (``faults`` holds them all)."""


class FsmError(Exception):
    """Root of every error fsm_core raises on purpose."""


@final
class SpecError(FsmError):
    """A table (or model file) is malformed; nothing of it was loaded.

    The message is ``FILE:LINE: WHERE: FAULT``, e.g.
    ``specs/agent.toml:212: row 'cancel.noop': unknown state 'idel' in from (did you mean
    'idle'? states: idle, busy)``; without ``:LINE`` where no line holds the fault (a file that
    is no TOML, a cycle across rows). A file with several faults raises one error for all of
    them: ``faults`` holds each (``file``, ``where``, ``fault`` and ``line`` are the first's),
    and the message says how many, then each on a line of its own.
    """

    def __init__(
        self,
        file: str,
        where: str,
        fault: str,
        line: int | None = None,
        *,
        faults: Sequence[SpecError] = (),
    ) -> None:
        self.file = file
        self.where = where
        self.fault = fault
        self.line = line
        self.faults: tuple[SpecError, ...] = tuple(faults) or (self,)
        # A file name comes from the file system: quote it when it holds a control character.
        shown = file if file.isprintable() else echo(file)
        at = f"{shown}:{line}" if line is not None else shown
        one = f"{at}: {where}: {fault}" if where else f"{at}: {fault}"
        if len(self.faults) == 1:
            super().__init__(one)
        else:
            each = [f"  {e}" for e in self.faults[:SHOWN_FAULTS]]
            if len(self.faults) > SHOWN_FAULTS:
                each.append(f"  ... and {len(self.faults) - SHOWN_FAULTS:,} more faults")
            lines = "\n".join(each)
            super().__init__(
                f"{shown}: {len(self.faults):,} faults; nothing of it was loaded:\n{lines}"
            )

    @classmethod
    def of(cls, faults: Sequence[SpecError]) -> SpecError:
        """One error for ``faults`` (at least one), in the order found."""
        if len(faults) == 1:
            return faults[0]
        first = faults[0]
        return cls(first.file, first.where, first.fault, first.line, faults=faults)


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """``"did you mean 'holder'? "`` when ``name`` is close to one of ``choices`` (by
    :func:`difflib.get_close_matches`), else ``""``: what a fault about an unknown name puts
    first in its parenthesis."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"did you mean {echo(close[0])}? " if close else ""


class TransitionError(FsmError):
    """An event could not be applied to a machine's current state."""


@final
class NotEnabled(TransitionError):
    """No row of the table is enabled for this event, state and arguments.

    For an internal event this means the runtime fired it at the wrong moment, which is a bug
    in the runtime, not in the caller.
    """


@final
class Rejected(TransitionError):
    """The table refuses this event here on purpose (a ``reject`` row or a rejected pair).

    ``str(error)`` is the table's reason, e.g. ``the agent is disposed; it accepts no more
    messages``.
    """


@final
class UsageError(FsmError):
    """The runtime refused a call on entry, before anything changed.

    A message that is not a :class:`~fsm_core.UserMessage` of strings, an id that is already
    pending, a waking send with no running event loop, a session another agent owns, an agent
    created while the runtime closes: each would corrupt the table, the inbox or the durable
    log if it got in, so it does not.
    """
