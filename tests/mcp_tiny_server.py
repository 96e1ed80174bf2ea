"""The least MCP server the leak measure of ``tests/test_acp_mcp.py`` needs, on the standard
library alone (``python -I -S``: it starts in milliseconds, where one built with the SDK takes
over a second): it answers ``initialize`` and ``tools/list`` (one tool, ``ping``), forks a child
that waits forever, and exits when stdin ends, leaving the child for the supervisor to reap.
"""

import json
import os
import signal
import sys

if os.fork() == 0:
    while True:
        signal.pause()

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
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
