"""The conversation a model request carries, read from the durable session.

An agent is a conversation: every request holds everything the agent's log says was said,
not only the current turn's messages. The messages are folded from the log alone, so a replay
of the log, an agent resumed on it (``create_agent(id, Session.load(path))``), a fork that
starts from a parent's log and a port reading the same JSONL all see the same history.

The history rule, in log order (which is claim order for user messages):

- ``user/message`` -> ``{"role": "user", "id", "text"}``. The runtime records one right after
  the ``inbox/claimed`` that claimed it (a turn's claim, or a step boundary's steering), so
  only *claimed* messages are said: a discarded message (``inbox/discarded``) never had one
  and never appears.
- ``assistant/message`` -> ``{"role": "assistant", "text", "tool_calls"}``; each ``tool/call``
  of the same turn and step is folded into that message's ``tool_calls`` as
  ``{"id", "name", "args"}``, in order (a call with no assistant message before it in its
  step gets one of its own, with empty text).
- ``tool/result`` -> ``{"role": "tool", "id", "ok", "result"}``.
- ``turn/end`` with the outcome ``blocked`` (a refusal: a prompt hook blocked the turn, or the
  model answered ``finish="blocked"``) *unsays* its turn: every message folded since that
  turn's ``turn/start`` (its claimed prompt, steering, answers, calls and results) is dropped.
  A refusal removes the refused prompt and what followed from every later request, as ACP's
  ``refusal`` stop reason promises ("the user prompt and everything that comes after it won't
  be included in the next prompt"); a policy hook's block would mean little if the model saw
  the blocked prompt on the next turn. The records stay in the log (it is append-only); only
  the fold skips them, so a log read back folds to the same history.
- Every other record (turn and step boundaries, claims, discards, other outcomes) says nothing.

What was recorded stays otherwise: a turn that ended aborted, disposed or in error contributes
its claimed messages and whatever of its steps reached the log (an answered call, a call
answered ``aborted`` before dispatch), exactly as a reader of the log sees it.

Messages are read-only ``dict``s (arrays are tuples): ``json.dumps`` takes them as they are,
and an ``agent/assemble`` listener that transforms the context builds new messages
(``{**message, ...}``, ``dict(message)``) instead of editing the history.

A read hands out the conversation as :class:`Messages`, a read-only sequence that is a
*snapshot*: it keeps the length and the messages it had when it was read, whatever the log
records later, so a model that keeps ``request.messages`` past its turn reads the same
conversation it was asked with. It shares the history's list instead of copying it (a request
costs nothing in the conversation's length): later messages are appended past its end, and
the one message the fold ever replaces (a step's answer, when its tool calls follow it) is
replaced in a fresh list once a snapshot covers it. ``json.dumps`` takes ``list(messages)``.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn, SupportsIndex, final, overload

from fsm_core.runtime._session import JSON, SessionEvent

__all__ = ["History", "Message", "Messages"]


@final
class Message(dict[str, Any]):
    """A read-only dict: a history message, or an object inside one."""

    __slots__ = ()

    def _read_only(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise TypeError("a history message is read-only; build a new one ({**message, ...})")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[type[Message], tuple[dict[str, Any]]]:
        return Message, (dict(self),)  # copy, deepcopy and pickle build through __init__


def _plain(value: JSON) -> Any:
    """A logged value as read-only plain JSON: objects are :class:`Message`, arrays tuples."""
    if isinstance(value, Mapping):
        return Message({key: _plain(item) for key, item in value.items()})
    if isinstance(value, tuple | list):
        return tuple(_plain(item) for item in value)
    return value


_SAYING = frozenset(
    ("user/message", "assistant/message", "tool/call", "tool/result", "turn/start", "turn/end")
)
"""The records the fold reads (the module's rule): what is said, and the turn boundaries a
refusal unsays back to; every other one is skipped."""


@final
class Messages(Sequence[Message]):
    """The conversation as it was when a request was assembled: a read-only snapshot.

        request.messages[-1]["text"]      # the last thing said before this request
        json.dumps(list(request.messages))

    It compares equal to a list or tuple of equal messages; slicing, ``copy`` and pickling
    give a tuple. It never changes, though the conversation goes on (see the module).
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[Message], length: int) -> None:
        # Invariant: items[:length] never changes (History copies before replacing in it).
        self._items = items
        self._length = length

    @overload
    def __getitem__(self, index: SupportsIndex) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._length][index])
        i = operator.index(index)
        if i < 0:
            i += self._length
        if not 0 <= i < self._length:
            raise IndexError("message index out of range")
        return self._items[i]

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Messages | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a tuple of dicts is unhashable too

    def __reduce__(self) -> tuple[type[tuple[Message, ...]], tuple[tuple[Message, ...]]]:
        return tuple, (tuple(self),)  # copy, deepcopy and pickle give a plain tuple

    def __repr__(self) -> str:
        return f"Messages({list(self)!r})"


@final
class History:
    """The messages of one append-only log, folded incrementally::

    history = History()
    messages = history.read(session.events)  # a snapshot; later calls read only new events
    """

    __slots__ = ("_calls_into", "_messages", "_read", "_shared", "_turn_began")

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._shared = 0
        """How many of ``_messages`` a :class:`Messages` snapshot handed out may read: those
        are never replaced in place."""
        self._read = 0
        """How many events of the log are folded in."""
        self._calls_into: tuple[JSON, JSON, int] | None = None
        """The turn, step and index of the assistant message the step's calls fold into."""
        self._turn_began = 0
        """How many messages there were at the last ``turn/start``: a refusal cuts back to it."""

    def read(self, events: Sequence[SessionEvent]) -> Messages:
        """Every message of ``events``; ``events`` is the log read before, with more appended."""
        for event in events[self._read :]:
            if event.type in _SAYING:
                self._fold(event)
        self._read = len(events)
        self._shared = len(self._messages)
        return Messages(self._messages, self._shared)

    def _fold(self, event: SessionEvent) -> None:
        data = event.data
        if event.type == "turn/start":
            self._turn_began = len(self._messages)
        elif event.type == "turn/end":
            outcome = data["outcome"]
            if isinstance(outcome, Mapping) and outcome.get("kind") == "blocked":
                self._unsay(self._turn_began)
        elif event.type == "user/message":
            self._messages.append(Message(role="user", id=data["id"], text=data["text"]))
        elif event.type == "assistant/message":
            self._messages.append(Message(role="assistant", text=data["text"], tool_calls=()))
            self._calls_into = (data["turn"], data["step"], len(self._messages) - 1)
        elif event.type == "tool/call":
            # The step's results may come between its calls: each call joins the step's answer.
            call = Message(id=data["id"], name=data["name"], args=_plain(data["args"]))
            into = self._calls_into
            if into is None or into[:2] != (data["turn"], data["step"]):
                self._messages.append(Message(role="assistant", text="", tool_calls=()))
                into = self._calls_into = (data["turn"], data["step"], len(self._messages) - 1)
            answer = self._messages[into[2]]
            calls = (*answer["tool_calls"], call)
            if into[2] < self._shared:  # a snapshot holds the answer without this call
                self._messages, self._shared = list(self._messages), 0
            self._messages[into[2]] = Message({**answer, "tool_calls": calls})
        elif event.type == "tool/result":
            result = _plain(data["result"])
            self._messages.append(Message(role="tool", id=data["id"], ok=data["ok"], result=result))

    def _unsay(self, keep: int) -> None:
        """Drop every message past the first ``keep`` (a refused turn's)."""
        if keep >= len(self._messages):
            return
        if keep < self._shared:  # a snapshot reads past the cut: cut a fresh list instead
            self._messages, self._shared = self._messages[:keep], 0
        else:
            del self._messages[keep:]
        self._calls_into = None
