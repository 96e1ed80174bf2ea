"""Diagrams and the clause traceability table, generated from the tables and drift-checked.

Every file is drawn from the compiled tables alone, so a changed row moves its drawing:

>>> from fsm_core.table import load_spec
>>> sorted(render_diagrams(load_spec()))  # doctest: +NORMALIZE_WHITESPACE
['activation.dot', 'activation.overview.dot', 'admission.dot', 'admission.overview.dot',
 'agent.dot', 'agent.overview.dot', 'traceability.md', 'wiring.dot', 'wiring.overview.dot']

Two DOTs per machine. ``<machine>.overview.dot`` is the one to read first, at screen size: states
and events only, one arrow per event between two states labelled ``event [row ids]``, the events
that stay in a state listed under its name, and every guard, effect and clause in tooltips
(:func:`overview_dot`). ``wiring.overview.dot`` is the same for the wiring
(:func:`wiring_overview_dot`). ``fsm-core view`` makes both clickable.

``<machine>.dot`` has every detail. A state is a box: its name, then one cell per row that stays
in it, ``event(params) [guard]`` / ``/ effect; effect; ...`` (in the row's order) / ``{row.id:
clauses}``; a ``reject`` row's cell is red, ``event [guard] ✗ reason``. A row that changes state
is an arrow per source state with the same label, coloured by event. The initial state has an
arrow from a start point; a state no row leaves has a thick border. A note lists the pairs
handled without a row, ``[i] states: events — why {clauses}``, and a "contracts" legend lists
each effect that declares one as ``effect(params): requires`` (what holds whenever the effect
runs), so a reader can check a row's effects against the state its earlier statements leave.

Rows that stay are drawn inside their state (UML's internal transitions), not as self-loops: the
agent has 49 of them over five states, and as labelled loops Graphviz stacks them into
overlapping columns that no one can read. Our tables have no entry or exit actions, so an
internal transition and a self-loop mean the same thing.

``wiring.dot`` (when the specs have a ``wiring.toml``) draws how the machines connect, from the
wiring's declaration alone: one node per role an instance plays (an activation, which stands for
its children and its parent too; its agent; a host-owned parent agent; the registry's door), one
solid arrow per ``[[calls]]`` entry from the machine whose effect makes it to the role its target
names, labelled ``effect -> event(args)``, and one dashed arrow per ``[[awaits]]`` entry from the
awaited agent to the activation whose event it fires, labelled ``event until predicate``; each
with its ``{id: clauses}``; and one bold dashed arrow with an open head per ``[[listeners]]``
entry from the machine whose notification is heard to the role its target names, labelled with
the listener's id, ``effect ~> event(args)`` and the budget it spends. An agent's own calls are
every agent's: they leave the box holding both agents.

``traceability.md`` maps every clause of ``clauses.toml`` (D1..D9 first) to the rows,
invariants, step invariants and pair rules citing it, and to the wiring's calls, awaits and
listeners; a
clause no row implements says ``not implemented:`` and why (its ``not_implemented`` in
``clauses.toml``). A clause that nothing cites (a clause the wiring alone cites is cited) and that
gives no such reason is refused (:class:`~fsm_core.SpecError`); the loader refuses a tag naming a
clause that gives one (and so does this, for a :class:`~fsm_core.table.Spec` built by hand).

:func:`write_diagrams` also renders an SVG beside each DOT when Graphviz's ``dot`` is on PATH
(``fsm-core diagrams`` says so when it is not: :func:`svg_skipped`). SVG
bytes depend on the Graphviz version, so an SVG is never compared byte for byte: it carries
``<!-- generated from agent.dot sha256=... -->`` and :func:`check_diagrams` compares that hash
with the DOT the tables give now. The DOT files and ``traceability.md`` are compared exactly.

The DOT text is assembled with the ``graphviz`` package's ``Digraph`` rather than by hand: it
quotes identifiers and attribute values (DOT keywords, punctuation, embedded quotes) the way
Graphviz parses them, and its output is deterministic (statements in the order added, attribute
dicts sorted, no timestamps) and pinned by ``uv.lock``. What could still vary is fixed here:
nodes and edges follow table order, labels wrap at a fixed width, backslashes are escaped
before ``Digraph`` quotes a label, and files are written with ``"\\n"`` line ends.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import graphviz

from fsm_core._errors import FsmError, SpecError, echo
from fsm_core.table import Machine, Spec, WiredAwait, WiredCall, WiredListener, Wiring
from fsm_core.table._expr import unparse, unparse_stmt
from fsm_core.table._table import Row
from fsm_core.table._wiring import LISTENER_TARGETS as _LISTENER_TARGETS
from fsm_core.table._wiring import TARGETS as _TARGETS

__all__ = [
    "check_diagrams",
    "default_out_dir",
    "overview_dot",
    "render_diagrams",
    "render_svg",
    "svg_skipped",
    "wiring_overview_dot",
    "write_diagrams",
]

_COMMAND = "fsm-core diagrams"
_TRACEABILITY = "traceability.md"
_OVERVIEW = ".overview"  # agent.overview.dot beside agent.dot
_WIRING = "wiring"  # wiring.dot, and the name the traceability gives the wiring's citations
_DECISION_SOURCE = "D"  # the clause source of DESIGN.md's pinned decisions (D1..D9)

_WIDTH = 46  # characters per label line before it wraps
_NOTE_WIDTH = 64
_FONT = "Helvetica"
_RANKDIR = "LR"
_NAME_PORT = "name"  # arrows attach to the state's name, not to the row cells under it
_REJECT = "firebrick"
_TAG = "gray35"
# Arrows take their event's colour, so a label can be matched to its arrow where they cross.
_PALETTE = (
    "#1f78b4", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#a6761d", "#e31a1c", "#000000",
    "#66a61e", "#666666",
)  # fmt: skip
_START = "(start)"  # node ids that no state can take: states are lower_snake_case
_PAIRS = "(pairs handled without a row)"
_CONTRACTS = "(effect contracts)"

_SVG_STAMP = re.compile(
    r"^<!-- generated from (?P<dot>\S+) sha256=(?P<sha>[0-9a-f]{64}) -->$", re.MULTILINE
)
_GENERATED_DOT = f"// Generated by `{_COMMAND}`"


def default_out_dir() -> Path:
    """Where ``fsm-core diagrams`` writes: the checkout's ``diagrams/``, else ``./diagrams``.

    A checkout is recognised by the ``pyproject.toml`` beside the ``fsm_core`` package; an
    installed wheel has none, so the current directory is used.
    """
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file():
        return root / "diagrams"
    return Path.cwd() / "diagrams"


def render_diagrams(spec: Spec) -> dict[str, str]:
    """Every generated text file as ``{file name: exact text}``, SVGs aside.

    Per machine ``<machine>.dot`` and ``<machine>.overview.dot``, ``wiring.dot`` and
    ``wiring.overview.dot`` when the specs have a wiring, then ``traceability.md``. The same
    tables give the same text on any machine.
    """
    if spec.wiring is not None and _WIRING in spec.machines:
        raise SpecError(
            spec.machines[_WIRING].table.file,
            "[machine]",
            f"machine name {echo(_WIRING)} is the wiring's diagram (wiring.dot); rename it",
        )
    files: dict[str, str] = {}
    for name, machine in spec.machines.items():
        files[f"{name}.dot"] = _machine_dot(machine)
        files[f"{name}{_OVERVIEW}.dot"] = overview_dot(machine)
    if spec.wiring is not None:
        files[f"{_WIRING}.dot"] = _wiring_dot(spec, spec.wiring)
        files[f"{_WIRING}{_OVERVIEW}.dot"] = wiring_overview_dot(spec, spec.wiring)
    files[_TRACEABILITY] = _traceability(spec)
    return files


def write_diagrams(spec: Spec, out: Path) -> list[Path]:
    """Write every rendered file into ``out``, and ``<machine>.svg`` when ``dot`` is on PATH.

    Returns the paths written. A generated ``.dot`` or ``.svg`` whose machine no longer
    exists (a renamed table) is deleted, so that ``check_diagrams`` passes afterwards.
    """
    out.mkdir(parents=True, exist_ok=True)
    files = render_diagrams(spec)
    dot = shutil.which("dot")
    written: list[Path] = []
    for name, text in files.items():
        written.append(_write(out / name, text))
        if dot is not None and name.endswith(".dot"):
            written.append(_write(out / _svg_name(name), _render_svg(dot, name, text)))
    for orphan in _orphans(out, files):
        orphan.unlink()
    return written


def svg_skipped() -> str | None:
    """What ``fsm-core diagrams`` says when it cannot render SVG (no ``dot``); None if it can."""
    if shutil.which("dot") is not None:
        return None
    return (
        "fsm-core: Graphviz `dot` is not on PATH: wrote the DOT files only, no SVG "
        "(install graphviz, e.g. `apt-get install graphviz`, and run `fsm-core diagrams` again)"
    )


def render_svg(name: str, text: str) -> str | None:
    """``dot -Tsvg`` of the DOT ``text`` (``name`` for errors); None when ``dot`` is absent."""
    dot = shutil.which("dot")
    return None if dot is None else _render_svg(dot, name, text)


def check_diagrams(spec: Spec, out: Path) -> list[str]:
    """One problem per stale, missing or orphaned file in ``out``; ``[]`` when all are current.

    Writes nothing. DOT files and ``traceability.md`` must equal what the tables give now. An
    SVG is checked by the DOT hash it embeds (never byte for byte, since its bytes depend on
    the Graphviz version); a missing SVG counts only when ``dot`` is on PATH to render it.
    """
    files = render_diagrams(spec)
    have_dot = shutil.which("dot") is not None
    problems: list[str] = []
    for name, text in files.items():
        path = out / name
        if not path.is_file():
            problems.append(f"{_show(path)} is missing")
        elif path.read_bytes() != text.encode("utf-8"):
            problems.append(f"{_show(path)} differs from the tables")
        if name.endswith(".dot"):
            svg = out / _svg_name(name)
            if svg.is_file():
                problem = _svg_problem(svg, name, text)
                if problem is not None:
                    problems.append(problem)
            elif have_dot:
                problems.append(f"{_show(svg)} is missing")
    problems.extend(
        f"{_show(orphan)} is generated from no table; delete it" for orphan in _orphans(out, files)
    )
    return problems


# --- DOT ------------------------------------------------------------------------------------------


def _machine_dot(machine: Machine) -> str:
    t = machine.table
    g = graphviz.Digraph(
        name=t.name, comment=f"Generated by `{_COMMAND}` from {t.file}. Do not edit."
    )
    g.attr(
        "graph",
        label=_label(
            [
                f"{t.name}: {t.title}",
                f"from {t.file}. Arrows change state; rows listed in a state stay in it;",
                "✗ rows refuse the event; a thick border marks a state no row leaves.",
            ],
            centred=True,
        ),
        labelloc="t",
        fontname=_FONT,
        fontsize="16",
        rankdir=_RANKDIR,
        nodesep="0.4",
        ranksep="0.9",
    )
    g.attr("node", fontname=_FONT, fontsize="10", shape="plain")
    g.attr("edge", fontname=_FONT, fontsize="10", arrowsize="0.7")

    g.node(_START, label="", shape="point", width="0.15")
    g.edge(_START, t.initial, tooltip=_escape(f"initial state: {t.initial}"))
    for state in t.states:
        g.node(state.name, label=_state_table(machine, state.name), tooltip=_oneline(state.doc))
    moves = [e for e in t.events if any(r.event == e and _moves(r) for r in t.rows)]
    colors = {event: _PALETTE[i % len(_PALETTE)] for i, event in enumerate(moves)}
    for row in t.rows:
        for source in row.sources:
            if row.target is None or row.target == source:
                continue  # drawn inside the state by _state_table
            text, tags = _row_lines(machine, row)
            g.edge(
                f"{source}:{_NAME_PORT}",
                f"{row.target}:{_NAME_PORT}",
                label=_label([*text, *tags]),
                tooltip=_oneline(row.doc or row.id),
                color=colors[row.event],
                fontcolor=colors[row.event],
            )

    if t.pair_rules:
        g.node(
            _PAIRS,
            label=_label(_pair_lines(machine)),
            shape="note",
            margin="0.15",
            color="gray40",
        )
    contracts = _contract_lines(machine)
    if contracts:
        g.node(
            _CONTRACTS,
            label=_label(contracts),
            shape="note",
            margin="0.15",
            color="gray40",
        )
    return str(g.source)


def _moves(row: Row) -> bool:
    """True iff the row leaves some source state (it is drawn as an arrow)."""
    return row.target is not None and any(s != row.target for s in row.sources)


def _state_table(machine: Machine, state: str) -> str:
    """An HTML-like label: the state's name, then one cell per row that stays in it.

    A state that no row leaves (a final state) has a thick border. One table row per source
    line, so a changed row changes only its own lines of the DOT file.
    """
    rows = [r for r in machine.table.rows if state in r.sources]
    stays = [r for r in rows if r.target in (None, state)]
    border = "3" if len(stays) == len(rows) else "1"
    name = f'<FONT POINT-SIZE="16"><B>{_html(state)}</B></FONT>'
    cells = [f'<TR><TD PORT="{_NAME_PORT}">{name}</TD></TR>']
    for row in stays:
        text, tags = _row_lines(machine, row)
        body = "<BR/>".join(_html(line) for line in text)
        if row.reject is not None:
            body = f'<FONT COLOR="{_REJECT}">{body}</FONT>'
        tag = "<BR/>".join(_html(line) for line in tags)
        cells.append(
            f'<TR><TD ALIGN="LEFT" BALIGN="LEFT">{body}<BR/>'
            f'<FONT COLOR="{_TAG}">{tag}</FONT></TD></TR>'
        )
    table = (
        f'<TABLE BORDER="{border}" CELLBORDER="0" CELLSPACING="0" CELLPADDING="4" STYLE="ROUNDED">'
    )
    return "\n\t\t".join([f"<{table}", "\n\t\t<HR/>".join(cells)]) + "\n\t</TABLE>>"


def _row_lines(machine: Machine, row: Row) -> tuple[list[str], list[str]]:
    """A row as text lines (``event [guard]``, ``/ effects``) and its ``{id: clauses}`` lines."""
    params = [p for p, _ in machine.table.events[row.event].params]
    head = row.event + (f"({', '.join(params)})" if params else "")
    if row.guard_text is not None:
        head += f" [{unparse(row.guard)}]"
    if row.reject is not None:
        text = _wrap(f"{_glue(head)} ✗ {row.reject}")
    else:
        text = _wrap(_glue(head))
        if row.effects:
            text += _wrap(_glue("/ " + "; ".join(unparse_stmt(s) for s in row.effects)))
    return text, _wrap(f"{{{row.id}: {', '.join(row.clauses)}}}")


def _pair_lines(machine: Machine) -> list[str]:
    """The note's lines: each pair rule as ``kind[i] states: events — why {clauses}``."""
    lines: list[str] = []
    for kind, heading in (
        ("ignored", "Ignored here on purpose (no effect):"),
        ("rejected", "Rejected here (raises Rejected with the reason):"),
    ):
        rules = [r for r in machine.table.pair_rules if r.kind == kind]
        if not rules:
            continue
        if lines:
            lines.append("")
        lines.append(heading)
        for rule in rules:
            text = (
                f"{kind}[{rule.index}] {', '.join(rule.states)}: {', '.join(rule.events)}"
                f"{_NBSP}— {rule.why} {{{', '.join(rule.clauses)}}}"
            )
            lines += _wrap(text, width=_NOTE_WIDTH, indent="    ")
    return lines


def _contract_lines(machine: Machine) -> list[str]:
    """The legend's lines: ``effect(params): requires`` per effect with a contract; or none."""
    contracts = [(e, e.requires) for e in machine.table.effects.values() if e.requires is not None]
    if not contracts:
        return []
    lines = ["Effect contracts (requires: holds whenever the effect runs):"]
    for e, requires in contracts:
        params = f"({', '.join(p for p, _ in e.params)})"
        lines += _wrap(
            f"{e.name}{params}:{_NBSP}{_glue(unparse(requires))}",
            width=_NOTE_WIDTH,
            indent="    ",
        )
    return lines


_OPERATOR = re.compile(r" (==|!=|:=|<=|>=|<|>|in) ")
_KEYWORD = re.compile(r"\b(not|when) ")
_NBSP = "\xa0"


def _glue(code: str) -> str:
    """Keep ``a == b``, ``x := y``, ``not p`` and ``when p`` on one line (no-break spaces)."""
    return _KEYWORD.sub(rf"\1{_NBSP}", _OPERATOR.sub(rf"{_NBSP}\1{_NBSP}", code))


def _wrap(text: str, width: int = _WIDTH, indent: str = "  ") -> list[str]:
    """Greedy wrap at ASCII spaces (never inside a word or a glued operator)."""
    lines = textwrap.wrap(
        text,
        width=width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace(_NBSP, " ") for line in lines] or [""]


def _escape(text: str) -> str:
    """Make ``text`` literal inside a DOT escString (``Digraph`` then escapes the quotes)."""
    return text.replace("\\", "\\\\")


def _oneline(text: str) -> str:
    return _escape(" ".join(text.split()))


def _html(text: str) -> str:
    """Make ``text`` literal inside an HTML-like label."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _label(lines: Sequence[str], *, centred: bool = False) -> str:
    r"""A multi-line DOT label: each line ends ``\l`` (left-justified) or ``\n`` (centred)."""
    end = "\\n" if centred else "\\l"
    text = "".join(_escape(line) + end for line in lines)
    return str(graphviz.nohtml(text))


# --- the wiring -----------------------------------------------------------------------------------

_DOOR = "door"
_HOST = "host"
_AGENTS = "cluster_agents"  # Graphviz draws a subgraph named cluster_* as a box
_ROLE = {"activation": "activation", "agent": "agent", "admission": _DOOR}
"""The node that stands for an instance of each machine (a host agent aside: :data:`_HOST`)."""
_ROLES = (
    (
        "activation",
        "activation",
        "an activation: its self, children (in admission order) and parent",
    ),
    ("agent", "agent", "an activation's own agent (new_agent: the one the step created)"),
    (_HOST, "agent", "a host-owned parent agent, which no activation represents"),
    (_DOOR, "admission", "the registry's door, one per runtime"),
)
"""Each node, in the order drawn: its id, the machine it runs, and what it stands for."""
_COLUMN = {"activation": 0, "agent": 1, _HOST: 1, _DOOR: 2}
"""Left to right; an arrow pointing leftwards does not constrain the layout."""
_LOOP_PORTS = ("n", "ne")
"""Where the self-loops (calls on ``self``, ``children``, ``parent``) attach: the first on top,
every later one at the top right corner, where Graphviz lays their labels out side by side
rather than on top of each other (several loops on one side share one label spot)."""


def _target_node(machine: str, target: str) -> str:
    """The node standing for what ``target`` names, from an effect of ``machine``."""
    return _HOST if target == _HOST else _ROLE[_TARGETS[machine][target]]


def _heard_node(x: WiredListener) -> str:
    """The node standing for the instance a listener's call is fired on."""
    return _ROLE[_LISTENER_TARGETS[x.machine][x.target]]


_LISTENED = {"style": "dashed,bold", "arrowhead": "onormal"}
"""How a listener's call is drawn, apart from a call (solid) and an await (dashed)."""


def _wiring_dot(spec: Spec, w: Wiring) -> str:
    g = graphviz.Digraph(
        name=_WIRING, comment=f"Generated by `{_COMMAND}` from {w.file}. Do not edit."
    )
    g.attr(
        "graph",
        label=_label(
            [
                "wiring: how instances meet",
                f"from {w.file}. An arrow points at the instance whose event fires.",
                "Solid: a call, made inside the effect on each instance its target names",
                "(effect -> event(args)). Dashed: an internal event, fired as a step of its own",
                "once the agent's state allows it (event until predicate; *: any value).",
                "Bold dashed, open head: a listener of the effect may make the call (its id, then",
                "effect ~> event(args), the budget it spends); a model lets it in by reactions.",
            ],
            centred=True,
        ),
        labelloc="t",
        fontname=_FONT,
        fontsize="16",
        rankdir=_RANKDIR,
        compound="true",
        nodesep="0.6",
        ranksep="1.2",
    )
    g.attr("node", fontname=_FONT, fontsize="11", shape="box", style="rounded", margin="0.2")
    g.attr("edge", fontname=_FONT, fontsize="10", arrowsize="0.7")

    def role(graph: graphviz.Digraph, node: str, machine: str, says: str) -> None:
        file = spec.machines[machine].table.file
        lines = [node, f"({file})", *_wrap(says, width=32, indent="")]
        graph.node(node, label=_label(lines, centred=True))

    for node, machine, says in _ROLES:
        if node == "agent":
            with g.subgraph(name=_AGENTS) as agents:
                agents.attr(
                    label=_escape("agents: an agent's own calls are every agent's"),
                    style="dashed",
                    color="gray40",
                    fontname=_FONT,
                    fontsize="10",
                )
                for inside, its, what in _ROLES:
                    if its == "agent":
                        role(agents, inside, its, what)
        elif machine != "agent":
            role(g, node, machine, says)

    edges: list[tuple[str, str, list[str], str, WiredCall | WiredAwait | WiredListener]] = [
        (_ROLE[c.machine], _target_node(c.machine, c.target), _call_lines(c), c.doc or c.id, c)
        for c in w.calls
    ]
    edges += [
        (_target_node(a.machine, a.target), _ROLE[a.machine], _await_lines(a), a.doc or a.id, a)
        for a in w.awaits
    ]
    edges += [
        (_ROLE[x.machine], _heard_node(x), _listener_lines(x), x.doc or x.id, x)
        for x in w.listeners
    ]
    loops = 0
    for n, (source, target, lines, doc, entry) in enumerate(edges):
        attrs = {"color": _PALETTE[n % len(_PALETTE)], "fontcolor": _PALETTE[n % len(_PALETTE)]}
        if isinstance(entry, WiredAwait):
            attrs["style"] = "dashed"
        if isinstance(entry, WiredListener):
            attrs |= _LISTENED
        if isinstance(entry, WiredCall) and entry.machine == "agent":
            attrs["ltail"] = _AGENTS  # from the box: every agent makes it
        if _COLUMN[source] > _COLUMN[target]:
            attrs["constraint"] = "false"
        if source == target:
            port = _LOOP_PORTS[min(loops, len(_LOOP_PORTS) - 1)]
            attrs |= {"tailport": port, "headport": port}
            loops += 1
        g.edge(source, target, label=_label(lines), tooltip=_oneline(doc), **attrs)
    if w.doc:
        g.node(
            "(wiring)",
            label=_label(_wrap(" ".join(w.doc.split()), width=_NOTE_WIDTH, indent="")),
            shape="note",
            margin="0.15",
            color="gray40",
            style="",
        )
    return str(g.source)


def _call_lines(c: WiredCall) -> list[str]:
    """``effect -> event(args)``, then what qualifies it, then ``{id: clauses}``."""
    args = ", ".join(f"{p}={v}" for p, v in c.arg_text)
    lines = _wrap(_glue(f"{c.effect} ->{_NBSP}{c.event}({args})"))
    marks = [f"on {c.target}"] if c.target != _target_node(c.machine, c.target) else []
    marks += [f"{c.only} only"] if c.only is not None else []
    marks += ["refused: caller"] if c.refused == "caller" else []
    if marks:
        lines += _wrap(f"({'; '.join(marks)})")
    return lines + _wrap(f"{{{c.id}: {', '.join(c.clauses)}}}")


def _listener_lines(x: WiredListener) -> list[str]:
    """The listener's id, ``effect ~> event(args)``, what it is fired on and spends, then its
    clauses."""
    args = ", ".join(f"{p}={v}" for p, v in x.arg_text)
    lines = [x.id, *_wrap(_glue(f"{x.effect} ~>{_NBSP}{x.event}({args})"))]
    on = [f"on {x.target}"] if x.target != _heard_node(x) else []
    lines += _wrap(f"({'; '.join([*on, f'spends {x.budget}'])})")
    return lines + _wrap(f"{{{', '.join(x.clauses)}}}")


def _await_lines(a: WiredAwait) -> list[str]:
    """``event(args) until predicate``, then ``{id: clauses}``."""
    args = ", ".join(f"{p}={' '.join(v.split())}" for p, v in a.arg_text)
    head = a.event + (f"({args})" if args else "")
    lines = _wrap(_glue(f"{head} until {' '.join(a.until_text.split())}"))
    return lines + _wrap(f"{{{a.id}: {', '.join(a.clauses)}}}")


# --- overviews ------------------------------------------------------------------------------------

_OVERVIEW_WIDTH = 34
_LEGEND = "(legend)"


def overview_dot(machine: Machine) -> str:
    """The machine at screen size: its states and events, one arrow per event between two states.

    An arrow is labelled ``event [row ids]``; the events that stay in a state are listed under
    its name the same way (a rejecting row's id ends in ``✗``). Guards, effects and clauses are
    in each arrow's and state's tooltip (SVG ``<title>``), and in ``<machine>.dot``. Each state's
    SVG element has the id ``state:<name>`` and each arrow ``event:<source>:<event>:<target>``,
    which ``fsm-core view`` makes clickable.
    """
    t = machine.table
    g = graphviz.Digraph(
        name=f"{t.name}_overview", comment=f"Generated by `{_COMMAND}` from {t.file}. Do not edit."
    )
    g.attr(
        "graph",
        label=_label(
            [
                f"{t.name}: {t.title}",
                f"overview of {t.file}: one arrow per event, labelled with its rows' ids;",
                "events that stay in a state are listed in it. Guards and effects: hover,",
                f"or see {t.name}.svg.",
            ],
            centred=True,
        ),
        labelloc="t",
        fontname=_FONT,
        fontsize="14",
        rankdir=_RANKDIR,
        nodesep="0.5",
        ranksep="0.8",
    )
    g.attr("node", fontname=_FONT, fontsize="11", shape="plain")
    g.attr("edge", fontname=_FONT, fontsize="11", arrowsize="0.7")
    g.node(_START, label="", shape="point", width="0.15")
    g.edge(_START, t.initial, tooltip=_escape(f"initial state: {t.initial}"))

    moves: dict[tuple[str, str, str], list[Row]] = {}
    stays: dict[str, dict[str, list[Row]]] = {s.name: {} for s in t.states}
    for row in t.rows:
        for source in row.sources:
            if row.target is None or row.target == source:
                stays[source].setdefault(row.event, []).append(row)
            else:
                moves.setdefault((source, row.event, row.target), []).append(row)
    colors = {
        e: _PALETTE[i % len(_PALETTE)] for i, e in enumerate(dict.fromkeys(e for _, e, _ in moves))
    }
    for state in t.states:
        g.node(
            state.name,
            label=_overview_state(machine, state.name, stays[state.name]),
            tooltip=_tooltip(
                [
                    state.doc,
                    *(_row_tip(machine, r) for rs in stays[state.name].values() for r in rs),
                ]
            ),
            id=f"state:{state.name}",
        )
    for (source, event, target), rows in moves.items():
        g.edge(
            source,
            target,
            label=_label(_event_lines(event, rows)),
            tooltip=_tooltip([_row_tip(machine, r) for r in rows]),
            id=f"event:{source}:{event}:{target}",
            color=colors[event],
            fontcolor=colors[event],
        )
    return str(g.source)


def _ids(rows: Sequence[Row]) -> str:
    return ", ".join(r.id + ("\u2717" if r.reject is not None else "") for r in rows)


def _event_lines(event: str, rows: Sequence[Row]) -> list[str]:
    """``event [id, id]``, wrapped at the overview's width."""
    return _wrap(f"{event} [{_ids(rows)}]", width=_OVERVIEW_WIDTH)


def _overview_state(machine: Machine, state: str, stays: dict[str, list[Row]]) -> str:
    """The state's name, then one line per event that stays in it: ``event [row ids]``."""
    leaves = any(state in r.sources and r.target not in (None, state) for r in machine.table.rows)
    name = f'<FONT POINT-SIZE="15"><B>{_html(state)}</B></FONT>'
    cells = [f"<TR><TD>{name}</TD></TR>"]
    if stays:
        lines = [line for event, rows in stays.items() for line in _event_lines(event, rows)]
        body = "<BR/>".join(_html(line) for line in lines)
        cells.append(
            f'<TR><TD ALIGN="LEFT" BALIGN="LEFT"><FONT POINT-SIZE="10" COLOR="{_TAG}">'
            f"{body}</FONT></TD></TR>"
        )
    border = "1" if leaves else "3"
    table = (
        f'<TABLE BORDER="{border}" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" STYLE="ROUNDED">'
    )
    return "\n\t\t".join([f"<{table}", "\n\t\t<HR/>".join(cells)]) + "\n\t</TABLE>>"


def _row_tip(machine: Machine, row: Row) -> str:
    """A row on one line: ``id: event [guard] / effects {clauses}``."""
    text, _ = _row_lines(machine, row)
    body = " ".join(" ".join(line.split()) for line in text)
    return f"{row.id}: {body} {{{', '.join(row.clauses)}}}"


def _tooltip(lines: Sequence[str]) -> str:
    r"""Tooltip text: one line per entry (``\n`` in DOT), each entry on one line."""
    return "\\n".join(_oneline(line) for line in lines if line.strip())


def wiring_overview_dot(spec: Spec, w: Wiring) -> str:
    """How one instance's effect reaches another, at screen size.

    The nodes of ``wiring.dot`` (an activation, its agent, a host-owned agent, the door); one
    arrow per pair of them and kind (solid: calls made inside an effect; dashed: events awaited
    until the agent's state allows them), labelled ``effect -> event`` per call (``event``
    per await). Arguments, ids and clauses are in the arrow's tooltip and in ``wiring.dot``.
    """
    g = graphviz.Digraph(
        name=f"{_WIRING}_overview",
        comment=f"Generated by `{_COMMAND}` from {w.file}. Do not edit.",
    )
    g.attr(
        "graph",
        label=_label(
            [
                "wiring overview: how one instance's effect reaches another",
                f"from {w.file}. Solid: an effect calls an event on the instance pointed at;",
                "dashed: the agent's state lets an activation's event fire; bold dashed, open",
                "head: a listener of the effect may call it (labelled by listener id). An agent's",
                "calls are a host agent's too. Arguments and clauses: hover, or see wiring.svg.",
            ],
            centred=True,
        ),
        labelloc="t",
        fontname=_FONT,
        fontsize="14",
        rankdir=_RANKDIR,
        nodesep="0.6",
        ranksep="1.4",
    )
    g.attr("node", fontname=_FONT, fontsize="13", shape="box", style="rounded", margin="0.2")
    g.attr("edge", fontname=_FONT, fontsize="11", arrowsize="0.7")
    for node, machine, says in _ROLES:
        g.node(
            node,
            label=_label([node, f"({machine})"], centred=True),
            tooltip=_oneline(says),
            id=f"role:{node}",
        )
    Kind = Literal["call", "await", "listener"]
    groups: dict[tuple[str, str, Kind], list[WiredCall | WiredAwait | WiredListener]] = {}
    for c in w.calls:
        key: tuple[str, str, Kind] = (_ROLE[c.machine], _target_node(c.machine, c.target), "call")
        groups.setdefault(key, []).append(c)
    for a in w.awaits:
        key = (_target_node(a.machine, a.target), _ROLE[a.machine], "await")
        groups.setdefault(key, []).append(a)
    for x in w.listeners:
        groups.setdefault((_ROLE[x.machine], _heard_node(x), "listener"), []).append(x)
    for n, ((source, target, kind), entries) in enumerate(groups.items()):
        color = _PALETTE[n % len(_PALETTE)]
        lines = list(dict.fromkeys(_overview_line(e) for e in entries))
        tips = [" ".join(_entry_lines(e)) for e in entries]
        attrs = {"color": color, "fontcolor": color}
        if kind == "await":
            attrs["style"] = "dashed"
        elif kind == "listener":
            attrs |= _LISTENED
        if _COLUMN[source] > _COLUMN[target]:
            attrs["constraint"] = "false"
        g.edge(
            source,
            target,
            label=_label(lines),
            tooltip=_tooltip(tips),
            id=f"wire:{source}:{target}:{kind}",
            **attrs,
        )
    return str(g.source)


def _overview_line(e: WiredCall | WiredAwait | WiredListener) -> str:
    """A call's ``effect -> event``, an await's ``event``, a listener's id."""
    if isinstance(e, WiredAwait):
        return e.event
    if isinstance(e, WiredListener):
        return e.id
    return f"{e.effect} -> {e.event}"


def _entry_lines(e: WiredCall | WiredAwait | WiredListener) -> list[str]:
    if isinstance(e, WiredAwait):
        return _await_lines(e)
    if isinstance(e, WiredListener):
        return _listener_lines(e)
    return _call_lines(e)


# --- traceability ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Citations:
    """What one machine (or the wiring) has that cites one clause, in file order."""

    rows: list[str] = field(default_factory=list)
    """A table's rows, or the wiring's calls."""
    invariants: list[str] = field(default_factory=list)
    step_invariants: list[str] = field(default_factory=list)
    pairs: list[str] = field(default_factory=list)
    awaits: list[str] = field(default_factory=list)
    """The wiring's awaits."""
    listeners: list[str] = field(default_factory=list)
    """The wiring's listeners."""

    def __str__(self) -> str:
        parts = [", ".join(_code(r) for r in self.rows)] if self.rows else []
        if self.awaits:
            word = "await" if len(self.awaits) == 1 else "awaits"
            parts.append(f"{word} {', '.join(_code(a) for a in self.awaits)}")
        if self.listeners:
            word = "listener" if len(self.listeners) == 1 else "listeners"
            parts.append(f"{word} {', '.join(_code(x) for x in self.listeners)}")
        if self.invariants:
            word = "invariant" if len(self.invariants) == 1 else "invariants"
            parts.append(f"{word} {', '.join(_code(i) for i in self.invariants)}")
        if self.step_invariants:
            word = "step invariant" if len(self.step_invariants) == 1 else "step invariants"
            parts.append(f"{word} {', '.join(_code(i) for i in self.step_invariants)}")
        if self.pairs:
            word = "pair rule" if len(self.pairs) == 1 else "pair rules"
            parts.append(f"{word} {', '.join(_code(p) for p in self.pairs)}")
        return "; ".join(parts)


def _traceability(spec: Spec) -> str:
    cited: dict[str, dict[str, _Citations]] = {cid: {} for cid in spec.clauses}
    for name, machine in spec.machines.items():
        t = machine.table

        def at(clause: str, machine_name: str = name) -> _Citations:
            return cited[clause].setdefault(machine_name, _Citations())

        for row in t.rows:
            for c in row.clauses:
                at(c).rows.append(row.id)
        for inv in t.invariants:
            for c in inv.clauses:
                at(c).invariants.append(inv.id)
        for step in t.stable:
            for c in step.clauses:
                at(c).step_invariants.append(step.id)
        for rule in t.pair_rules:
            for c in rule.clauses:
                at(c).pairs.append(f"{rule.kind}[{rule.index}]")
    # The wiring's citations sit under its own name; a machine cannot take it (render_diagrams).
    if spec.wiring is not None:
        for call in spec.wiring.calls:
            for c in call.clauses:
                cited[c].setdefault(_WIRING, _Citations()).rows.append(call.id)
        for wait in spec.wiring.awaits:
            for c in wait.clauses:
                cited[c].setdefault(_WIRING, _Citations()).awaits.append(wait.id)
        for heard in spec.wiring.listeners:
            for c in heard.clauses:
                cited[c].setdefault(_WIRING, _Citations()).listeners.append(heard.id)

    def files(by: dict[str, _Citations]) -> str:
        names = [spec.machines[m].table.file for m in spec.machines if m in by]
        if _WIRING in by and spec.wiring is not None:
            names.append(spec.wiring.file)
        return ", ".join(names)

    catalogue = f"{spec.root.name}/clauses.toml"
    for cid, clause in spec.clauses.items():
        if not cited[cid] and clause.not_implemented is None:
            raise SpecError(
                catalogue,
                f"clause {echo(cid)}",
                "no row, pair rule or invariant of any table (nor any wiring entry) cites it (tag "
                'the rows that implement it, or say why none does with not_implemented = "...")',
            )
        if cited[cid] and clause.not_implemented is not None:
            raise SpecError(  # the loader refuses the tag; a Spec built by hand may not
                catalogue,
                f"clause {echo(cid)}",
                "not_implemented says no row implements it, yet it is cited in "
                f"{files(cited[cid])} (drop the tag, or the not_implemented)",
            )

    def cell(cid: str) -> str:
        by = cited[cid]
        why = spec.clauses[cid].not_implemented
        if why is not None:
            return f"not implemented: {_cell(why)}"
        return "<br>".join(f"{m}: {by[m]}" for m in (*spec.machines, _WIRING) if m in by)

    tables = " and ".join(f"`{m.table.file}`" for m in spec.machines.values())
    wired = (
        f",\nand the calls, awaits and listeners of `{spec.wiring.file}` that cite it (under "
        "`wiring:`)"
        if spec.wiring is not None
        else ""
    )
    out = [
        f"<!-- Generated by `{_COMMAND}` from {spec.root.name}/. Do not edit. -->",
        "",
        "# Traceability: clauses to rows",
        "",
        f"For every clause of `{spec.root.name}/clauses.toml`: the rows, invariants, step "
        "invariants and pair rules",
        f"of {tables} that cite it{wired}.",
        "A clause no row implements says so, and why (its `not_implemented`).",
        "A step invariant (`[[invariants]]` with `unchanged` and `while`) keeps a variable's value",
        "between two moments a listener can observe while its predicate holds at both.",
        "Pair rules are a table's `[[ignored]]` and `[[rejected]]` entries, numbered in file order",
        f"and listed at the end. `{_COMMAND} --check` fails when this file is stale.",
        "",
        "## Pinned decisions (DESIGN.md)",
        "",
        "| Decision | Summary | Cited by |",
        "| --- | --- | --- |",
    ]
    out += [
        f"| {_code(d)} | {_cell(clause.summary)} | {cell(d)} |"
        for d, clause in spec.clauses.items()
        if clause.source == _DECISION_SOURCE
    ]
    out += [
        "",
        "## Every clause, in catalogue order",
        "",
        "| Clause | Summary | Cited by |",
        "| --- | --- | --- |",
    ]
    out += [
        f"| {_code(cid)} | {_cell(clause.summary)} | {cell(cid)} |"
        for cid, clause in spec.clauses.items()
    ]
    out += [
        "",
        "## Pairs handled without a row",
        "",
        "| Machine | Pair rule | States | Events | Why | Clauses |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, machine in spec.machines.items():
        for rule in machine.table.pair_rules:
            cols = [
                name,
                _code(f"{rule.kind}[{rule.index}]"),
                ", ".join(rule.states),
                ", ".join(rule.events),
                _cell(rule.why),
                ", ".join(_code(c) for c in rule.clauses),
            ]
            out.append(f"| {' | '.join(cols)} |")
    return "\n".join(out) + "\n"


def _code(text: str) -> str:
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# --- files and SVG --------------------------------------------------------------------------------


def _svg_name(dot_name: str) -> str:
    return dot_name.removesuffix(".dot") + ".svg"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _render_svg(dot: str, name: str, text: str) -> str:
    """``dot -Tsvg`` of ``text``, stamped after the XML prolog with the DOT's hash."""
    done = subprocess.run(
        [dot, "-Tsvg"], input=text.encode("utf-8"), capture_output=True, check=False
    )
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()
        raise FsmError(f"dot -Tsvg failed on {name} (exit {done.returncode}): {err}")
    svg = done.stdout.decode("utf-8").replace("\r\n", "\n")
    stamp = f"<!-- generated from {name} sha256={_sha256(text)} -->\n"
    if svg.startswith("<?xml"):
        prolog, _, rest = svg.partition("\n")
        return f"{prolog}\n{stamp}{rest}"
    return stamp + svg


def _svg_problem(svg: Path, dot_name: str, text: str) -> str | None:
    stamp = _SVG_STAMP.search(svg.read_text(encoding="utf-8", errors="replace"))
    if stamp is None or stamp["dot"] != dot_name:
        return f"{_show(svg)} has no `generated from {dot_name}` hash; regenerate it"
    if stamp["sha"] != _sha256(text):
        return f"{_show(svg)} was rendered from an older {dot_name}"
    return None


def _orphans(out: Path, files: Iterable[str]) -> list[Path]:
    """Generated ``.dot``/``.svg`` files in ``out`` that no current machine produces."""
    expected = {*files, *(_svg_name(n) for n in files if n.endswith(".dot"))}
    found: list[Path] = []
    for path in sorted([*out.glob("*.dot"), *out.glob("*.svg")]):
        if path.name in expected or not path.is_file():
            continue
        with path.open(encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
        if head.startswith(_GENERATED_DOT) or _SVG_STAMP.search(head):
            found.append(path)
    return found


def _write(path: Path, text: str) -> Path:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    return path


def _show(path: Path) -> str:
    """``path`` relative to the working directory when it lies inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
