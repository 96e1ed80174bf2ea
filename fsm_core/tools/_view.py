"""``fsm-core view``: the tables and their counterexamples in one self-contained HTML page.

The page shows each machine's overview (``fsm_core.diagrams.overview_dot`` rendered by
Graphviz's ``dot`` when it is on PATH; a list of states otherwise) and the wiring overview.
Clicking a state or an arrow shows its rows; clicking a row shows its guard, effects, clauses
and each clause's quoted seed sentence (from ``clauses.toml``, which carries the quotes: the
sources are never read). An ITF trace (``fsm-core check --trace-format itf --trace-out F``)
embedded with ``--trace``, or opened in the page, steps forward and back (buttons, or the arrow
keys), with the stepping instance's state highlighted, the variables the step changed listed,
and the listeners' calls nested under the step.

The page needs no network: its CSS and JavaScript are inlined from ``view.css`` and ``view.js``
beside this module (package data, shipped in the wheel). Everything from the tables and the
traces is data, never markup or code: it is embedded as JSON in a ``<script
type="application/json">`` with ``<``, ``>`` and ``&`` escaped, the script reads it with
``JSON.parse`` and shows it with ``textContent``, and the SVG that ``dot`` drew is parsed by
``DOMParser`` and stripped of scripts and event attributes before it joins the page.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from fsm_core._errors import FsmError
from fsm_core._files import write_whole
from fsm_core.diagrams import overview_dot, render_svg, wiring_overview_dot
from fsm_core.table import Machine, Spec, load_spec
from fsm_core.table._expr import unparse, unparse_stmt

__all__ = ["configure", "render_view", "run"]

DEFAULT_OUT = Path("fsm-core-view.html")
_TEMPLATE = ("view.html", "view.css", "view.js")
_MARK = {
    "policy": "{{script-hash}}",
    "style": "/*{{style}}*/",
    "script": "/*{{script}}*/",
    "data": "{{data}}",
}


class _ViewError(FsmError):
    """A trace ``fsm-core view`` cannot embed: unreadable, not JSON, or not an ITF trace."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare ``fsm-core view [--out FILE] [--trace FILE ...]``."""
    parser.description = (
        "Write one self-contained HTML page (no network): the machines' overviews, each state's "
        "and row's guard, effects, clauses and seed sentence on a click, and counterexamples "
        "(ITF traces) to step through. Open it in any browser."
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="FILE",
        help=f"the page to write, replaced if it exists (default: {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="embed this ITF trace (`fsm-core check --trace-format itf --trace-out FILE`); "
        "repeatable; the page can also open one",
    )


def run(args: argparse.Namespace) -> int:
    """Write the page; every trace is read (and refused) before anything is written."""
    # --specs is the top-level parser's; a caller that built only this parser has none.
    spec = load_spec(getattr(args, "specs", None))
    traces = [_read_trace(path) for path in args.trace]
    page = render_view(spec, traces)
    out: Path = args.out
    try:  # whole or not at all: a browser never opens half a page
        write_whole(out, page)
    except OSError as e:
        raise _ViewError(f"--out {out}: {e.strerror or e}") from None
    print(f"wrote {args.out}")
    if shutil.which("dot") is None:
        print(
            "fsm-core: Graphviz `dot` is not on PATH: the page lists each machine's states "
            "instead of drawing its overview (install graphviz to draw them)",
            file=sys.stderr,
        )
    return 0


def render_view(spec: Spec, traces: Sequence[tuple[str, Any]] = ()) -> str:
    """The page's HTML for ``spec``, with ``traces`` (``(name, ITF document)``) embedded."""
    data: dict[str, Any] = {
        "machines": _machines_payload(spec),
        "wiring": None,
        "clauses": {
            cid: {"source": c.source, "quote": c.quote, "summary": c.summary}
            for cid, c in spec.clauses.items()
        },
        "traces": [{"name": name, "itf": itf} for name, itf in traces],
    }
    if spec.wiring is not None:
        dot = wiring_overview_dot(spec, spec.wiring)
        data["wiring"] = {"file": spec.wiring.file, "svg": render_svg("wiring.overview.dot", dot)}
    html, css, js = (resources.files(__package__).joinpath(n).read_text("utf-8") for n in _TEMPLATE)
    # The page's policy lets this one script run, by its hash, and no other: not an inline
    # event handler, not a script from anywhere; and it lets nothing be fetched.
    digest = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    page = html.replace(_MARK["policy"], f"'sha256-{digest}'", 1)
    page = page.replace(_MARK["style"], css, 1).replace(_MARK["script"], js, 1)
    # The data goes in last, so nothing in it can be taken for a marker.
    return page.replace(_MARK["data"], _script_json(data), 1)


def _machines_payload(spec: Spec) -> list[dict[str, Any]]:
    out = []
    for name, machine in spec.machines.items():
        t = machine.table
        svg = render_svg(f"{name}.overview.dot", overview_dot(machine))
        out.append(
            {
                "name": name,
                "title": t.title,
                "file": t.file,
                "state_var": t.state_var,
                "initial": t.initial,
                "states": [{"name": s.name, "doc": s.doc} for s in t.states],
                "rows": [_row_payload(machine, i) for i in range(len(t.rows))],
                "svg": svg,
            }
        )
    return out


def _row_payload(machine: Machine, index: int) -> dict[str, Any]:
    row = machine.table.rows[index]
    params = [p for p, _ in machine.table.events[row.event].params]
    return {
        "id": row.id,
        "event": row.event,
        "params": params,
        "sources": list(row.sources),
        "target": row.target,
        "guard": unparse(row.guard) if row.guard_text is not None else None,
        "reject": row.reject,
        "effects": [unparse_stmt(s) for s in row.effects],
        "clauses": list(row.clauses),
        "doc": " ".join(row.doc.split()),
    }


def _script_json(data: object) -> str:
    """``data`` as JSON that a ``<script type="application/json">`` holds verbatim: no ``<``,
    ``>`` or ``&`` (so no ``</script>`` or ``<!--``) appears in it, only their escapes."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _read_trace(path: Path) -> tuple[str, Any]:
    """``(file name, ITF document)``; refused, naming the file and why, if it is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise _ViewError(f"--trace {path}: {why}") from None
    try:
        itf = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise _ViewError(
            f"--trace {path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except ValueError as e:  # NaN or Infinity: Python reads them, a browser's JSON does not
        raise _ViewError(f"--trace {path}: not JSON ({e})") from None
    states = itf.get("states") if isinstance(itf, dict) else None
    if not isinstance(states, list) or not all(isinstance(s, dict) for s in states):
        raise _ViewError(
            f"--trace {path}: not an ITF trace (it needs a list of states under "
            '"states"; `fsm-core check --trace-format itf --trace-out FILE` writes one)'
        )
    return path.name, itf


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON value")
