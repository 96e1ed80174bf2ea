"""The scripted agent the official-client tests drive: ``fsm-core acp --model
tests.acp.agent:make`` (a model only), or ``python -m tests.acp.agent`` (the same
:func:`fsm_core.acp.serve`, with :data:`TOOLS` as well: ``fsm-core acp`` takes no tools).

The model reads the last prompt as a command:

- ``hold``: waits until the turn is cancelled;
- ``refuse``: refuses (``finish="blocked"``);
- ``call NAME JSON``: calls the tool NAME with the JSON args, then answers ``done: RESULT``;
- ``tools``: answers ``tools:`` and the names of the tools it is offered (its session's MCP
  servers' among them), joined by ``, ``;
- anything else: ``echo:`` and every user text the request carries, joined by `` | `` (so a
  test sees the conversation the model was asked with).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from fsm_core import AbortSignal, Reply, Request, ToolCall
from fsm_core.acp import serve


class Scripted:
    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        last = request.messages[-1]
        if last.get("role") == "tool":
            return Reply(f"done: {json.dumps(last['result'])}")
        users = [str(m["text"]) for m in request.messages if m.get("role") == "user"]
        text = users[-1] if users else ""
        if text == "hold":
            await signal.wait()
            signal.raise_if_aborted()
        if text == "refuse":
            return Reply("I will not", finish="blocked")
        if text == "tools":
            return Reply("tools: " + ", ".join(request.tools))
        if text.startswith("call "):
            _, name, args = text.split(" ", 2)
            return Reply("", (ToolCall("c1", name, json.loads(args)),), finish="tool_calls")
        return Reply("echo: " + " | ".join(users))


def make() -> Scripted:
    return Scripted()


class Add:
    name = "add"

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        return args["a"] + args["b"]


class Boom:
    name = "boom"

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        raise RuntimeError("the tool broke")


TOOLS = (Add(), Boom())

if __name__ == "__main__":
    asyncio.run(serve(Scripted(), tools=TOOLS))
