"""``fsm-core``: print the tables, generate the diagrams.

Exit status: 0 success, 1 a check failed (stale diagrams), 2 bad input (a malformed table).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from fsm_core._errors import SpecError
from fsm_core.diagrams import check_diagrams, default_out_dir, write_diagrams
from fsm_core.export import spec_to_json, spec_to_text
from fsm_core.spec import load_spec


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fsm-core",
        description="Executable specification of turn cancellation and multi-agent teardown.",
    )
    parser.add_argument(
        "--specs", type=Path, default=None, help="tables directory (default: the shipped specs/)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_spec = sub.add_parser("spec", help="print the transition tables")
    p_spec.add_argument("machine", nargs="*", help="machines to print (default: all)")
    p_spec.add_argument("--json", action="store_true", help="the JSON export ports consume")

    p_diag = sub.add_parser("diagrams", help="generate DOT (and SVG, when dot is present)")
    p_diag.add_argument("--out", type=Path, default=None, help="output directory")
    p_diag.add_argument(
        "--check", action="store_true", help="fail and name each stale file; write nothing"
    )

    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.specs)
    except SpecError as e:
        print(f"fsm-core: {e}", file=sys.stderr)
        return 2

    if args.command == "spec":
        unknown = [m for m in args.machine if m not in spec.machines]
        if unknown:
            names = ", ".join(spec.machines)
            print(f"fsm-core: unknown machine {unknown[0]!r} (machines: {names})", file=sys.stderr)
            return 2
        chosen = args.machine or list(spec.machines)
        if args.json:
            # ASCII escapes keep the export printable on any terminal; JSON readers undo them.
            print(json.dumps(spec_to_json(spec, chosen), indent=2))
        else:
            print(spec_to_text(spec, chosen), end="")
        return 0

    out = args.out if args.out is not None else default_out_dir()
    if args.check:
        stale = check_diagrams(spec, out)
        for problem in stale:
            print(f"stale: {problem}", file=sys.stderr)
        if stale:
            print("fsm-core: diagrams are stale; run `fsm-core diagrams`", file=sys.stderr)
            return 1
        print(f"diagrams up to date in {out}")
        return 0
    for path in write_diagrams(spec, out):
        print(f"wrote {path}")
    return 0
