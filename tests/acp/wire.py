"""Every message of a wire tap's log (``tap.py``) checked against the ACP v1 JSON Schema that
the TypeScript SDK's npm package ships: the whole message against the schema, and besides, a
request's or notification's params against its method's definition and a response's result
against the response definition of the request it answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator


class Wire:
    def __init__(self, schema_path: Path) -> None:
        self.schema = json.loads(schema_path.read_text())
        self.whole = Draft202012Validator(self.schema)
        self.params: dict[str, str] = {}
        """Method -> the definition of its params."""
        self.results: dict[str, str] = {}
        """Method -> the definition of its result."""
        for name, definition in self.schema["$defs"].items():
            if "x-method" in definition:
                kind = self.results if name.endswith("Response") else self.params
                kind[definition["x-method"]] = name

    def _check(self, name: str, value: Any) -> list[str]:
        schema = {"$ref": f"#/$defs/{name}", "$defs": self.schema["$defs"]}
        validator = Draft202012Validator(schema)
        return [
            f"{name}: {e.message} at {list(e.absolute_path)}" for e in validator.iter_errors(value)
        ]

    def faults(self, log: Path) -> tuple[int, list[str]]:
        """How many messages the log holds, and what in them the schema refuses."""
        asked: dict[tuple[str, Any], str] = {}
        faults: list[str] = []
        count = 0
        for number, raw in enumerate(log.read_text().splitlines(), 1):
            entry = json.loads(raw)
            side, line = entry["from"], entry["line"]
            if not line.strip():
                continue
            count += 1
            where = f"{log.name} line {number} ({side}: {line.strip()[:300]})"
            message = json.loads(line)
            found = [f"message: {e.message}" for e in self.whole.iter_errors(message)]
            method = message.get("method")
            if method is not None:
                if method not in self.params:
                    found.append(f"unknown method {method}")
                else:
                    found += self._check(self.params[method], message.get("params"))
                if "id" in message:
                    asked[(side, message["id"])] = method
            elif "result" in message:
                other = "agent" if side == "client" else "client"
                method = asked.get((other, message["id"]))
                if method is None:
                    found.append("a result answering no request")
                else:
                    found += self._check(self.results[method], message["result"])
            faults += [f"{where}: {fault}" for fault in found]
        return count, faults
