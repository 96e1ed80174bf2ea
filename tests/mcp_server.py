"""A small MCP server for ``tests/test_acp_mcp.py``, written with the ``mcp`` SDK's
``MCPServer`` (mcp 1.x called it FastMCP); run as ``python tests/mcp_server.py``.

Tools: ``add(a, b)``; ``wait()``, which runs until its call is cancelled (it first writes
``waiting`` to the FIFO ``$MCP_TEST_FIFO``, so a test knows the call reached the server);
``cancellations()``, how many ``wait`` calls the server saw cancelled (it waits for the first).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("test")
_cancelled: list[anyio.Event] = []


def _event() -> anyio.Event:
    if not _cancelled:
        _cancelled.append(anyio.Event())
    return _cancelled[0]


_count = [0]


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def wait() -> str:
    """Wait until the call is cancelled."""
    fifo = os.environ.get("MCP_TEST_FIFO")
    if fifo:
        Path(fifo).write_text("waiting")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        _count[0] += 1
        _event().set()
        raise
    return "never"


@server.tool()
async def cancellations() -> int:
    """How many wait calls were cancelled (waits up to 30 s for the first)."""
    with anyio.move_on_after(30):
        await _event().wait()
    return _count[0]


if __name__ == "__main__":
    server.run()
