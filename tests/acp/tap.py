"""A wire tap: ``python tap.py LOG COMMAND...`` runs COMMAND (an ACP agent) with its stdin and
stdout passed through, and appends every line each way to LOG as ``{"from": "client" |
"agent", "line": ...}``, so a test can check every message on the wire. Exits with COMMAND's
status; closing the tap's stdin closes COMMAND's. Only the standard library: it starts fast."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import IO


def pump(source: IO[bytes], sink: IO[bytes], side: str, log: IO[str], lock: threading.Lock) -> None:
    for line in iter(source.readline, b""):
        with lock:
            log.write(json.dumps({"from": side, "line": line.decode("utf-8", "replace")}) + "\n")
            log.flush()
        try:
            sink.write(line)
            sink.flush()
        except (BrokenPipeError, ValueError):
            break
    sink.close()


def main() -> int:
    log_path, *command = sys.argv[1:]
    lock = threading.Lock()
    with open(log_path, "a", encoding="utf-8") as log:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdin is not None and child.stdout is not None
        into = threading.Thread(
            target=pump, args=(sys.stdin.buffer, child.stdin, "client", log, lock), daemon=True
        )
        into.start()
        pump(child.stdout, sys.stdout.buffer, "agent", log, lock)
        return child.wait()


if __name__ == "__main__":
    sys.exit(main())
