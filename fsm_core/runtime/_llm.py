"""The model and tool seams: what the runtime asks a language model and its tools.

The runtime talks to a model through ``adapter.generate(request, signal) -> Reply`` and to
tools through ``tool.execute(args, signal)``. Both receive the turn's signal explicitly; both
may cooperate with it (raise :class:`~fsm_core.Aborted` once it aborts) or ignore it, and the
runtime waits either way. :mod:`fsm_core.testing` has scripted stand-ins for tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, final

from fsm_core.runtime._signal import AbortSignal

__all__ = ["Finish", "ModelAdapter", "Reply", "Request", "Tool", "ToolCall", "ToolSpec"]

Finish = Literal["stop", "tool_calls", "max_tokens", "blocked"]
"""Why the model stopped: done, wants tools run, hit its token limit, or refused (blocked)."""


@final
@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)


@final
@dataclass(frozen=True, slots=True)
class Reply:
    """What the model answered: text and/or tool calls, and why it stopped."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish: Finish = "stop"


@final
@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told of one tool it may call: its name (as in ``Request.tools`` and
    ``ToolCall.name``), what it does, and the JSON Schema its arguments must match.

        ToolSpec("mcp__files__read", "Read a file", {"type": "object", "properties": {...}})
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})


@final
@dataclass(frozen=True, slots=True)
class Request:
    """One model request: the agent, the assembled messages and the available tools.

    ``messages`` is the whole conversation, folded from the durable session (the rule is in
    ``fsm_core/runtime/_history.py``), as the ``agent/assemble`` waterfall left it: a
    read-only sequence of read-only dicts, which is a snapshot (kept past the turn, it still
    holds exactly what this request was asked with). It shares the conversation instead of
    copying it, so ``json.dumps`` wants ``list(request.messages)``.

    ``tools`` names every tool the model may call; ``tool_specs`` describes those of them that
    come with a description and an argument schema, in the order of ``tools``: the MCP tools
    of an ACP session (``fsm-core acp``, see the README's ACP section). The runtime's own tools
    are named only.
    """

    agent_id: str
    turn: int
    step: int
    messages: Sequence[Mapping[str, Any]]
    tools: tuple[str, ...]
    tool_specs: tuple[ToolSpec, ...] = ()


class ModelAdapter(Protocol):
    async def generate(self, request: Request, signal: AbortSignal) -> Reply: ...


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any: ...
