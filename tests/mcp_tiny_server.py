"""The least MCP server the reaping tests of ``tests/test_acp_mcp.py`` need, on the standard
library alone (``python -I -S``: it starts in milliseconds, where one built with the SDK takes
a second of CPU): it answers ``initialize`` and ``tools/list`` (one tool, ``ping``) and exits
when its stdin ends. It forks a child first, which waits forever.

    python -I -S mcp_tiny_server.py [MARKER] [--pids FILE] [--huge] [--stubborn] [--where FILE]
                                    [--endless]

``--pids FILE``: the child leaves the server's process group (``setsid``) and ignores SIGTERM,
and ``SERVER_PID CHILD_PID`` is written to FILE before the server answers anything.
``--huge``: answer ``tools/call`` with a line over the agent's 16 MiB limit.
``--stubborn``: once stdin ends, the server ignores SIGTERM and waits forever (a server that
ignores the MCP shutdown). ``--where FILE``: write the server's working directory,
``$MCP_TEST_VALUE`` and its arguments to FILE as JSON. ``--endless``: ``tools/list`` answers
every page with a new tool and a cursor to one more page, forever. ``MARKER`` is only there
to be found in the command line.
"""

import json
import os
import signal
import sys

args = sys.argv[1:]
pids = args[args.index("--pids") + 1] if "--pids" in args else None

child = os.fork()
if child == 0:
    if pids is not None:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        signal.pause()
if pids is not None:
    with open(pids + ".tmp", "w") as out:
        out.write(f"{os.getpid()} {child}")
    os.rename(pids + ".tmp", pids)

if "--where" in args:
    where = {"cwd": os.getcwd(), "value": os.environ.get("MCP_TEST_VALUE"), "args": args}
    with open(args[args.index("--where") + 1], "w") as out:
        json.dump(where, out)

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny", "version": "1"},
        }
    elif message["method"] == "tools/list":
        result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
        if "--endless" in args:
            page = int((message.get("params") or {}).get("cursor") or 0) + 1
            tool = {"name": f"tool{page}", "inputSchema": {"type": "object"}}
            result = {"tools": [tool], "nextCursor": str(page)}
    elif message["method"] == "tools/call" and "--huge" in args:
        result = {"content": [{"type": "text", "text": "x" * (17 << 20)}], "isError": False}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()

if "--stubborn" in args:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        signal.pause()
