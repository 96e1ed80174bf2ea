"""Load a table from TOML, type-check it, compile it and prove it well-formed.

Every fault raises :class:`~fsm_core.SpecError` naming the file, the place (row id, variable,
event, ...) and what is wrong; a table with any fault is rejected whole.
"""

from __future__ import annotations

import ast
import itertools
import math
import os
import re
import stat
import tomllib
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NoReturn

from fsm_core._errors import SpecError, did_you_mean, echo, known
from fsm_core.table import _lines, _proofs
from fsm_core.table._domain import domain_holds
from fsm_core.table._expr import (
    BOOL,
    KEYWORDS,
    Assign,
    BinOp,
    Block,
    Call,
    Cond,
    Def,
    Expr,
    ExprError,
    In,
    Lit,
    Not,
    Scope,
    Stmt,
    Type,
    Value,
    check,
    check_stmt_value,
    enum_type,
    int_type,
    parse_expr,
    parse_stmt,
    show,
    unparse,
)
from fsm_core.table._limits import DEFAULT_LIMITS, MAX_FILE_BYTES, MAX_INT, MAX_NESTING, Limits
from fsm_core.table._machine import Machine, State, show_args
from fsm_core.table._table import (
    CLAUSE_ID,
    ID,
    NAME,
    Clause,
    Definition,
    EffectSpec,
    EventSpec,
    Invariant,
    PairRule,
    Row,
    Stability,
    StateSpec,
    Table,
    Variable,
)

_INT = re.compile(r"int\[([^\]]*?)\.\.([^\]]*)\]\Z")
"""An integer type, ``int[lo..hi]``; each bound is checked by ``_bound`` (ASCII only)."""
_INTEGER = re.compile(r"-?[0-9]+\Z")
_PATH_PART = re.compile(r"[A-Za-z0-9_.-]+")
_CONSTANT = re.compile(r"[A-Za-z_]\w*\Z", re.ASCII)
_INDEXED = re.compile(
    r"(?P<kind>rows|invariants|ignored|rejected|calls|awaits)\[(?P<index>[0-9]+)\]"
)
_SECTION = re.compile(r"\[(?P<name>[\w.-]+)\]( (?P<key>\w+))?")
_NAMED = re.compile(
    r"(?P<kind>row|invariant|event|effect|var|def|type|state|constant|source|clause) "
    r"(?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
)
_SECTIONS = {
    "row": "rows", "invariant": "invariants", "event": "events", "effect": "effects",
    "var": "vars", "def": "defs", "type": "types", "state": "states", "constant": "constants",
    "source": "sources", "clause": "clauses",
}  # fmt: skip
"""How faults name places (``row 'cancel.noop'``, ``rows[3]``, ``[environment] budgets``),
read back to find their lines."""
_TOP = {
    "machine", "constants", "states", "types", "vars", "defs", "events", "effects",
    "rows", "ignored", "rejected", "invariants",
}  # fmt: skip


class _File:
    """Error reporting for one file: each fault names the file, the line and the place.

    A loader may go on after a fault to find the others: each entry it reads inside
    :meth:`each` that fails is recorded, and :meth:`done` raises one :class:`SpecError` for
    every fault recorded (the file is still refused whole)."""

    def __init__(self, display: str) -> None:
        self.display = display
        self.data: Mapping[str, Any] = {}
        self.faults: list[SpecError] = []
        self._text = ""
        self._lines: dict[_lines.Path, int] | None = None
        """Each key's line, read from ``_text`` when a fault first asks (most loads have none)."""
        self._entry: tuple[str, int] | None = None
        """The ``[[rows]]`` or ``[[invariants]]`` entry being read, if any (see :meth:`at`)."""

    def read(self, path: Path) -> dict[str, Any]:
        """The TOML file at ``path`` (see :func:`read_toml`), its keys' lines kept for faults."""
        text = read_text(path, self.display)
        data = _parse_toml(text, self.display)
        self.data, self._text, self._lines = data, text, None
        return data

    def line(self, where: str, key: str | None = None) -> int | None:
        """The line of the place ``where`` names (as the faults name places), at ``key``."""
        path = self._place(where)
        if path is None:
            return None
        if self._lines is None:
            self._lines = _lines.key_lines(self._text)
        return _lines.line_of(self._lines, (*path, key) if key is not None else path)

    def _place(self, where: str) -> _lines.Path | None:
        if (m := _INDEXED.fullmatch(where)) is not None:
            return (m["kind"], int(m["index"]))
        if (m := _SECTION.fullmatch(where)) is not None:
            return tuple(m["name"].split(".")) + ((m["key"],) if m["key"] else ())
        if (m := _NAMED.match(where)) is None:
            return None
        try:
            name = ast.literal_eval(m["name"])
        except (ValueError, SyntaxError):  # shortened by echo(): no longer the name
            return None
        section = _SECTIONS[m["kind"]]
        if section in ("rows", "invariants"):
            return self._by_id(section, name)
        return (section, name)

    def _by_id(self, section: str, name: object) -> _lines.Path | None:
        """The entry of the array of tables ``section`` whose id is ``name``: where several
        have it (an id written twice), the one being read (:meth:`at`), else the last."""
        entries = self.data.get(section)
        found = [
            i
            for i, body in enumerate(entries if isinstance(entries, list) else [])
            if isinstance(body, dict) and body.get("id") == name
        ]
        if self._entry is not None and self._entry in ((section, i) for i in found):
            return self._entry
        return (section, found[-1]) if found else None

    @contextmanager
    def at(self, section: str, index: int) -> Iterator[None]:
        """Read ``section``'s ``index``-th entry: a fault naming it by an id that other entries
        also have (a repeated id) is placed at this one's line."""
        self._entry = (section, index)
        try:
            yield
        finally:
            self._entry = None

    def first_seen(self, section: str, index: int) -> str:
        """``rows[3] (line 40)``: an entry named for a fault about another, with its line."""
        where = f"{section}[{index}]"
        line = self.line(where, "id")
        return where if line is None else f"{where} (line {line})"

    def fail(self, where: str, fault: str, key: str | None = None) -> NoReturn:
        raise SpecError(self.display, where, fault, self.line(where, key))

    @contextmanager
    def each(self) -> Iterator[None]:
        """Read one entry: a fault in it is recorded, and reading goes on after the block."""
        try:
            yield
        except SpecError as e:
            self.faults.extend(e.faults)

    def done(self) -> None:
        """Raise one :class:`SpecError` for every fault recorded so far, if any."""
        if self.faults:
            raise SpecError.of(self.faults)

    def keys(
        self, where: str, table: object, required: Iterable[str], optional: Iterable[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(table, dict):
            self.fail(where, f"expected a table, found {type(table).__name__}")
        required, allowed = list(required), {*required, *optional}
        for key in table:
            if key not in allowed:
                expected = known(sorted(allowed))
                self.fail(
                    where,
                    f"unknown key {echo(key)} ({did_you_mean(key, allowed)}expected one of: "
                    f"{expected})",
                    key,
                )
        for key in required:
            if key not in table:
                self.fail(where, f"missing key {echo(key)}")
        return table

    def table(self, where: str, value: object) -> dict[str, Any]:
        """A section of named entries (``[vars]``, ``[events]``, ...): it must be a table."""
        if not isinstance(value, dict):
            self.fail(where, f"expected a table, found {type(value).__name__}")
        return value

    def text(self, where: str, value: object, key: str) -> str:
        """A string of plain text: no control or format character but newline and tab, so
        nothing read from a table can drive a terminal when ``fsm-core spec`` prints it."""
        if not isinstance(value, str):
            self.fail(where, f"{key} must be a string, found {type(value).__name__}", key)
        if not value.isprintable():
            for i, c in enumerate(value):
                if c not in "\n\t" and unicodedata.category(c).startswith("C"):
                    self.fail(
                        where,
                        f"{key} holds the non-printing character {echo(c)} at position {i} "
                        "(a table is plain text; newlines and tabs are allowed)",
                        key,
                    )
        return value

    def names(self, where: str, value: object, key: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self.fail(where, f"{key} must be a non-empty list of names", key)
        seen: set[str] = set()
        for name in value:
            if name in seen:
                self.fail(where, f"{key} lists {echo(name)} twice", key)
            seen.add(name)
        return tuple(value)

    def id(self, where: str, value: object) -> str:
        """A row or invariant id (:data:`ID`): ids name rows in traces, labels and diagrams."""
        if not isinstance(value, str) or not ID.fullmatch(value):
            self.fail(
                where,
                f"id {echo(value)} is not a valid id "
                "(lower_snake_case words joined by dots, e.g. send.idle.wake)",
                "id",
            )
        return value

    def ident(self, where: str, name: str) -> str:
        if not NAME.fullmatch(name) or name in KEYWORDS:
            self.fail(where, f"{echo(name)} is not a valid name (lower_snake_case, not a keyword)")
        return name


def _exists(path: Path, kind: Callable[[Path], bool]) -> bool:
    """``kind(path)`` (``Path.is_file``, ``Path.is_dir``), False where the OS cannot even
    look the path up (a name too long, say), which pathlib raises as OSError."""
    try:
        return kind(path)
    except OSError:
        return False


def read_text(path: Path, display: str) -> str:
    """The text of a regular file of at most ``MAX_FILE_BYTES``, decoded as UTF-8.

    Anything else (a missing file, a directory, a FIFO, a device, a symlink loop, an
    unreadable file, invalid UTF-8) raises :class:`SpecError` naming the file. The file is
    opened without blocking and checked to be regular before a byte is read, so a FIFO
    cannot hang the loader waiting for a writer.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SpecError(display, "", "file not found") from None
    except OSError as e:
        raise SpecError(display, "", f"cannot open the file: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise SpecError(display, "", f"{kind}; expected a file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise SpecError(display, "", f"cannot read the file: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(display, "", f"larger than the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise SpecError(display, "", f"not valid UTF-8 at line {line}") from None


def read_toml(path: Path, display: str) -> dict[str, Any]:
    """Read a TOML file (see :func:`read_text`); a fault becomes a :class:`SpecError`.

    Values may nest at most ``MAX_NESTING`` deep: deeper is not a table anyone writes, and
    it would overflow the parser's stack (or, as nested ``when`` blocks, generated code).
    """
    return _parse_toml(read_text(path, display), display)


def _parse_toml(text: str, display: str) -> dict[str, Any]:
    """``text`` read as TOML (see :func:`read_toml`)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(display, "", f"not valid TOML: {e}") from None
    except RecursionError:
        raise SpecError(display, "", f"values nested over {MAX_NESTING} deep") from None
    except ValueError:
        # tomllib converts integer text with int(), which refuses over 4,300 digits.
        raise SpecError(display, "", "not valid TOML: an integer too long to read") from None
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            raise SpecError(display, "", f"values nested over {MAX_NESTING} deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return data


def load_clauses(path: Path, display: str | None = None) -> dict[str, Clause]:
    """Load the clause catalogue and check every quote against its source text.

    Every fault is found, each at its line (as in a table), and the catalogue is refused whole.
    """
    f = _File(display or f"{path.parent.name}/{path.name}")
    data = f.keys("", f.read(path), ["sources", "clauses"])
    sources: dict[str, str] = {}
    unread: set[str] = set()  # sources with a fault: their clauses' quotes are not checked
    for key, rel in f.keys("[sources]", data["sources"], [], data["sources"]).items():
        unread.add(key)
        with f.each():
            _clause_id(f, "[sources]", "source", key)
            where = f"source {echo(key)}"
            text = f.text(where, rel, "path")
            parts = text.split("/")
            if any(not _PATH_PART.fullmatch(part) or part in (".", "..") for part in parts):
                f.fail(
                    where,
                    f"{echo(text)} is not a relative path inside the catalogue's directory "
                    "(names of letters, digits, '.', '_' and '-' joined by '/')",
                )
            try:
                sources[key] = " ".join(read_text(path.parent / text, text).split())
            except SpecError as e:
                f.fail(where, str(e))
            unread.discard(key)
    clauses: dict[str, Clause] = {}
    for cid, body in f.table("[clauses]", data["clauses"]).items():
        with f.each():
            clause = _clause(f, cid, body, sources, unread, data["sources"])
            if clause is not None:
                clauses[cid] = clause
    f.done()
    return clauses


def _clause(
    f: _File,
    cid: str,
    body: object,
    sources: Mapping[str, str],
    unread: set[str],
    paths: Mapping[str, str],
) -> Clause | None:
    """The clause ``cid`` of the catalogue, or None after recording each of its faults."""
    _clause_id(f, "[clauses]", "clause", cid)
    where = f"clause {echo(cid)}"
    c = f.keys(where, body, ["source", "quote", "summary"], ["not_implemented"])
    found = len(f.faults)
    source = quote = summary = ""
    with f.each():
        source = f.text(where, c["source"], "source")
        if source not in sources and source not in unread:
            f.fail(where, f"unknown source {echo(source)} (sources: {known(paths)})", "source")
    with f.each():
        quote = f.text(where, c["quote"], "quote")
        if not quote.strip():
            f.fail(where, "the quote is empty (a clause quotes the words it stands for)", "quote")
        if source in sources and " ".join(quote.split()) not in sources[source]:
            f.fail(where, f"quote not found verbatim in {paths[source]}", "quote")
    with f.each():
        summary = f.text(where, c["summary"], "summary")
    why = None
    with f.each():
        if "not_implemented" in c:
            why = f.text(where, c["not_implemented"], "not_implemented")
            if not why.strip():
                f.fail(
                    where,
                    "not_implemented is empty (it says why no row implements the clause)",
                    "not_implemented",
                )
    if len(f.faults) > found or source in unread:
        return None
    return Clause(cid, source, quote, summary, why)


def _clause_id(f: _File, where: str, what: str, key: str) -> None:
    if not CLAUSE_ID.fullmatch(key):
        f.fail(
            where,
            f"{what} id {echo(key)} is not a valid id (letters, digits and _ in words joined "
            "by . or -, e.g. S000.first-wins)",
            key,
        )


def load_table(
    path: Path,
    clauses: Mapping[str, Clause],
    display: str | None = None,
    constants: Mapping[str, int] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Machine:
    """Load, type-check, compile and validate one table.

    ``constants`` overrides values of the table's ``[constants]`` (a model's scale point);
    naming a constant the table does not declare is an error. The domain-wide checks
    (determinism, coverage, domains) run at the table's declared constants, which a table keeps
    small; at an overridden scale the table is type-checked again and the model checker takes
    over, since its domain may be far too large to enumerate (bench L has 10^10 valuations).
    ``limits`` (a model's ``[model] limits``) bounds both: see :mod:`fsm_core.table._limits`.
    """
    f = _File(display or f"{path.parent.name}/{path.name}")
    data = f.read(path)
    declared = Machine(_parse(f, data, clauses, {}, limits))
    key = _proofs.proof_key(data, clauses, limits)
    known_good = _proofs.proved(key)
    _validate(f, declared, limits, exhaustive=not known_good)
    if not known_good:
        _proofs.record(key)
    if not constants:
        return declared
    scaled = Machine(_parse(f, data, clauses, constants, limits))
    _validate(f, scaled, limits, exhaustive=False)
    return scaled


# --- parsing -------------------------------------------------------------------------------------


def _parse(
    f: _File,
    data: dict[str, Any],
    clauses: Mapping[str, Clause],
    overrides: Mapping[str, int],
    limits: Limits,
) -> Table:
    return _TableParser(f, data, clauses, overrides, limits).table()


class _TableParser:
    """One table file's sections, parsed in dependency order.

    Each section method reads its part of ``data`` and records what later sections resolve
    names against (constants, types, variables, symbols, definitions, events, effects), so a
    section only ever sees the ones before it.
    """

    def __init__(
        self,
        f: _File,
        data: dict[str, Any],
        clauses: Mapping[str, Clause],
        overrides: Mapping[str, int],
        limits: Limits,
    ) -> None:
        self.f = f
        self.data = data
        self.clauses = clauses
        self.overrides = overrides
        self.limits = limits
        self.consts: dict[str, int] = {}
        self.types: dict[str, Type] = {"bool": BOOL}
        self.var_types: dict[str, Type] = {}
        self.symbols: frozenset[str] = frozenset()
        self.defs: dict[str, Definition] = {}
        self.events: dict[str, EventSpec] = {}
        self.effects: dict[str, EffectSpec] = {}

    def table(self) -> Table:
        f, data = self.f, self.data
        f.keys("", data, ["machine", "states", "vars", "events", "rows", "invariants"], _TOP)
        m = f.keys("[machine]", data["machine"], ["name", "title", "state_var", "initial"], ["doc"])
        self.state_var = f.ident("[machine]", f.text("[machine]", m["state_var"], "state_var"))
        states = self._states()
        self.state_names = tuple(s.name for s in states)
        initial = f.text("[machine]", m["initial"], "initial")
        if initial not in self.state_names:
            f.fail(
                "[machine]",
                f"unknown initial state {echo(initial)} "
                f"({did_you_mean(initial, self.state_names)}states: {known(self.state_names)})",
                "initial",
            )
        # Each section resolves names against the ones before it: a section with faults is
        # the last read, so that no fault is only the echo of another.
        self._constants()
        f.done()
        self._types()
        f.done()
        variables = self._variables()
        f.done()
        self._symbols()
        f.done()
        self._defs()
        f.done()
        self.base = Scope(self.var_types, {}, self._def_exprs(), self.symbols, self.consts)
        self._events()
        f.done()
        self._effects()
        f.done()
        # Rows, pair rules and invariants name nothing of each other: all read, then refused.
        rows = self._rows()
        pair_rules = self._pair_rules()
        invariants, stable = self._invariants()
        f.done()
        return Table(
            file=f.display, name=f.ident("[machine]", f.text("[machine]", m["name"], "name")),
            title=f.text("[machine]", m["title"], "title"),
            doc=f.text("[machine]", m.get("doc", ""), "doc"),
            state_var=self.state_var, states=states, initial=initial, types=self.types,
            variables=variables, events=self.events, effects=self.effects, defs=self.defs,
            rows=rows, pair_rules=pair_rules, invariants=invariants, stable=stable,
        )  # fmt: skip

    # --- declarations ---------------------------------------------------------------------

    def _states(self) -> tuple[StateSpec, ...]:
        f, data = self.f, self.data
        states: list[StateSpec] = []
        for name, body in f.keys("[states]", data["states"], [], data["states"]).items():
            where = f"state {echo(name)}"
            with f.each():
                f.ident(where, name)
                state_body = f.keys(where, body, [], ["doc"])
                states.append(StateSpec(name, f.text(where, state_body.get("doc", ""), "doc")))
        f.done()
        if not states:
            f.fail("[states]", "a machine needs at least one state")
        if len(states) > self.limits.values:
            f.fail("[states]", _over(f"{len(states):,} states", "values", self.limits.values))
        return tuple(states)

    def _constants(self) -> None:
        f, consts = self.f, self.consts
        for name, value in f.table("[constants]", self.data.get("constants", {})).items():
            with f.each():
                if not _CONSTANT.match(name):
                    f.fail(f"constant {echo(name)}", f"{echo(name)} is not a valid name")
                consts[name] = _constant(f, name, value)
        for name, value in self.overrides.items():
            with f.each():
                if name not in consts:
                    f.fail(
                        "[constants]",
                        f"unknown constant {echo(name)} ({did_you_mean(name, consts)}constants: "
                        f"{known(consts) or 'none'})",
                    )
                consts[name] = _constant(f, name, value)

    def _types(self) -> None:
        f = self.f
        for name, values in f.table("[types]", self.data.get("types", {})).items():
            with f.each():
                self._type(name, values)
        self.types[self.state_var] = enum_type(self.state_var, self.state_names)

    def _type(self, name: str, values: object) -> None:
        f, limits = self.f, self.limits
        where = f"type {echo(name)}"
        f.ident(where, name)
        if name == self.state_var:
            f.fail(where, f"{echo(name)} is the state variable's type; its values are the [states]")
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) for v in values)
        ):
            f.fail(where, "an enumeration is a non-empty list of value names")
        if len(values) > limits.values:
            f.fail(where, _over(f"{len(values):,} values", "values", limits.values))
        if len(set(values)) != len(values):
            f.fail(where, "an enumeration lists a value twice")
        for v in values:
            f.ident(where, v)
        self.types[name] = enum_type(name, values)

    def _bound(self, where: str, text: str) -> int:
        if text in self.consts:
            return self.consts[text]
        if _INTEGER.match(text):  # ASCII digits only: int() would read any script's
            # Compare the text first: int() refuses over 4,300 digits.
            if len(text.lstrip("-")) > len(str(MAX_INT)) or abs(int(text)) > MAX_INT:
                self.f.fail(where, f"the range bound {echo(text)} is over the limit of {MAX_INT:,}")
            return int(text)
        if _CONSTANT.match(text):
            self.f.fail(where, f"unknown constant {echo(text)} in an integer range")
        self.f.fail(
            where,
            f"the range bound {echo(text)} is neither an integer in ASCII digits nor a "
            "constant name",
        )

    def _resolve_type(self, where: str, spec: object) -> Type:
        f, limits = self.f, self.limits
        text = f.text(where, spec, "type")
        if (mi := _INT.match(text)) is not None:
            lo, hi = self._bound(where, mi.group(1)), self._bound(where, mi.group(2))
            if lo > hi:
                f.fail(where, f"empty integer range {text}")
            if hi - lo + 1 > limits.values:
                f.fail(
                    where,
                    _over(f"int[{lo}..{hi}] has {hi - lo + 1:,} values", "values", limits.values),
                )
            return int_type(lo, hi)
        if text not in self.types:
            f.fail(
                where,
                f"unknown type {echo(text)} ({did_you_mean(text, self.types)}types: "
                f"{known(self.types)}, int[lo..hi])",
                "type",
            )
        return self.types[text]

    def _variables(self) -> tuple[Variable, ...]:
        f = self.f
        variables: list[Variable] = []
        for name, body in f.table("[vars]", self.data["vars"]).items():
            with f.each():
                variables.append(self._variable(name, body))
        self.var_types = {
            self.state_var: self.types[self.state_var],
            **{v.name: v.type for v in variables},
        }
        return tuple(variables)

    def _variable(self, name: str, body: object) -> Variable:
        f = self.f
        where = f"var {echo(name)}"
        f.ident(where, name)
        if name == self.state_var:
            f.fail(where, f"{echo(name)} is the state variable; [machine] declares it")
        v = f.keys(where, body, ["type", "init"], ["doc"])
        t = self._resolve_type(where, v["type"])
        if isinstance(v["init"], str) and v["init"] in self.consts and t.kind == "int":
            v = {**v, "init": self.consts[v["init"]]}
        if v["init"] not in t.values or type(v["init"]) is not type(t.values[0]):
            f.fail(where, f"init {echo(v['init'])} is not a value of {t}", "init")
        return Variable(name, t, v["init"], f.text(where, v.get("doc", ""), "doc"))

    def _symbols(self) -> None:
        f = self.f
        for name in self.consts:
            with f.each():
                if name in self.var_types:
                    f.fail(f"constant {echo(name)}", f"{echo(name)} is also a variable")
        self.symbols = frozenset(
            str(x) for t in self.types.values() if t.kind == "enum" for x in t.values
        )
        for name in self.var_types:
            with f.each():
                if name in self.symbols:
                    f.fail(
                        f"var {echo(name)}",
                        f"{echo(name)} is both a variable and an enumeration value",
                    )

    def _def_exprs(self) -> dict[str, Expr]:
        return {k: v.expr for k, v in self.defs.items()}

    def _defs(self) -> None:
        f = self.f
        for name, body in f.table("[defs]", self.data.get("defs", {})).items():
            found = len(f.faults)
            with f.each():
                where = f"def {echo(name)}"
                f.ident(where, name)
                if name in self.symbols or name in self.var_types:
                    f.fail(where, f"{echo(name)} is already a variable or enumeration value")
                d = f.keys(where, body, ["expr"], ["doc"])
                text = f.text(where, d["expr"], "expr")
                # A definition sees only the definitions before it: no recursion, no cycle.
                scope = Scope(self.var_types, {}, self._def_exprs(), self.symbols, self.consts)
                expr = _bool_expr(f, where, text, scope, "expr")
                self.defs[name] = Definition(
                    name, expr, text, f.text(where, d.get("doc", ""), "doc")
                )
            if len(f.faults) > found and isinstance(name, str) and NAME.fullmatch(name):
                # A definition in fault stands in as true, so that a later one naming it is
                # judged on its own rather than refused for the name (the table is refused).
                self.defs.setdefault(name, Definition(name, Lit(True), "true", ""))
        if "quiescent" not in f.table("[defs]", self.data.get("defs", {})):
            f.fail("[defs]", "missing definition 'quiescent' (the states where nothing runs)")

    def _params(self, where: str, spec: object, scoped: bool) -> tuple[tuple[str, Type], ...]:
        """Parameters; ``scoped`` ones (an event's) are names inside guards and effects."""
        f = self.f
        out = []
        for pname, ptype in f.keys(where, spec, [], spec if isinstance(spec, dict) else []).items():
            f.ident(where, pname)
            if scoped and (pname in self.symbols or pname in self.var_types):
                f.fail(where, f"parameter {echo(pname)} shadows a variable or enumeration value")
            if scoped and pname in self.defs:
                f.fail(where, f"parameter {echo(pname)} shadows the definition {echo(pname)}")
            out.append((pname, self._resolve_type(f"{where} parameter {echo(pname)}", ptype)))
        return tuple(out)

    def _events(self) -> None:
        f, limits = self.f, self.limits
        for name, body in f.table("[events]", self.data["events"]).items():
            with f.each():
                where = f"event {echo(name)}"
                f.ident(where, name)
                ev = f.keys(where, body, ["kind"], ["params", "doc"])
                if ev["kind"] not in ("input", "internal"):
                    f.fail(where, f"kind must be 'input' or 'internal', not {echo(ev['kind'])}")
                params = self._params(where, ev.get("params", {}), scoped=True)
                arguments = math.prod(len(t.values) for _, t in params)
                if arguments > limits.values:
                    f.fail(where, _over(f"{arguments:,} argument tuples", "values", limits.values))
                doc = f.text(where, ev.get("doc", ""), "doc")
                self.events[name] = EventSpec(name, ev["kind"], params, doc)

    def _effects(self) -> None:
        f = self.f
        for name, body in f.table("[effects]", self.data.get("effects", {})).items():
            with f.each():
                where = f"effect {echo(name)}"
                f.ident(where, name)
                e = f.keys(where, body, [], ["params", "notifies", "doc", "requires"])
                notifies = e.get("notifies", False)
                if not isinstance(notifies, bool):
                    f.fail(where, "notifies must be true or false")
                requires_text = e.get("requires")
                params = self._params(where, e.get("params", {}), scoped=requires_text is not None)
                requires = None
                if requires_text is not None:
                    scope = self._scope(dict(params))
                    text = f.text(where, requires_text, "requires")
                    requires = _bool_expr(f, where, text, scope, "requires")
                doc = f.text(where, e.get("doc", ""), "doc")
                self.effects[name] = EffectSpec(
                    name, params, notifies, doc, requires, requires_text
                )

    def _scope(self, params: Mapping[str, Type]) -> Scope:
        return Scope(self.var_types, params, self.base.defs, self.symbols, self.consts)

    # --- rows, pairs, invariants ------------------------------------------------------------

    def _tags(self, where: str, body: Mapping[str, Any]) -> tuple[str, ...]:
        f = self.f
        if "clauses" not in body or not body["clauses"]:
            f.fail(
                where,
                "missing clause tag (every row and invariant names the clause it implements)",
                "clauses",
            )
        out = f.names(where, body["clauses"], "clauses")
        for tag in out:
            if tag not in self.clauses:
                f.fail(
                    where,
                    f"unknown clause {echo(tag)} ({did_you_mean(tag, self.clauses)}see "
                    "specs/clauses.toml)",
                    "clauses",
                )
            if self.clauses[tag].not_implemented is not None:
                f.fail(
                    where,
                    f"clause {echo(tag)} says no row implements it (its not_implemented in "
                    "specs/clauses.toml): drop the tag, or the not_implemented",
                    "clauses",
                )
        return out

    def _state_names(self, where: str, value: object, key: str) -> tuple[str, ...]:
        names = self.f.names(where, value, key)
        for s in names:
            if s not in self.state_names:
                self.f.fail(
                    where,
                    f"unknown state {echo(s)} in {key} ({did_you_mean(s, self.state_names)}"
                    f"states: {known(self.state_names)})",
                    key,
                )
        return names

    def _rows(self) -> tuple[Row, ...]:
        f = self.f
        rows: list[Row] = []
        seen: dict[str, int] = {}
        for i, body in enumerate(_array(f, self.data, "rows")):
            with f.each(), f.at("rows", i):
                raw_id = body.get("id") if isinstance(body, dict) else None
                where = f"row {echo(raw_id)}" if _is_id(raw_id) else f"rows[{i}]"
                r = f.keys(
                    where,
                    body,
                    ["id", "on", "from"],
                    ["clauses", "guard", "to", "reject", "do", "doc"],
                )
                rid = f.id(where, r["id"])
                if rid in seen:
                    first = f.first_seen("rows", seen[rid])
                    f.fail(where, f"duplicate row id: rows[{i}] repeats {first}", "id")
                seen[rid] = i
                row = self._row(where, rid, r)
                if row is not None:
                    rows.append(row)
        return tuple(rows)

    def _row(self, where: str, rid: str, r: Mapping[str, Any]) -> Row | None:
        """The row ``r``, or None after recording each of its keys' faults: its event, states,
        guard, effects and tags are read apart, so that a row with two faults shows both."""
        f = self.f
        found = len(f.faults)
        event = ""  # no event's name
        with f.each():
            event = f.text(where, r["on"], "on")
            if event not in self.events:
                f.fail(
                    where,
                    f"unknown event {echo(event)} ({did_you_mean(event, self.events)}events: "
                    f"{known(self.events)})",
                    "on",
                )
        sources: tuple[str, ...] = ()
        with f.each():
            sources = self._state_names(where, r["from"], "from")
        target = r.get("to")
        with f.each():
            if target is not None and target not in self.state_names:
                f.fail(
                    where,
                    f"unknown state {echo(target)} in to "
                    f"({did_you_mean(target, self.state_names)}states: "
                    f"{known(self.state_names)})",
                    "to",
                )
        reject = r.get("reject")
        with f.each():
            if reject is not None and ("to" in r or "do" in r):
                f.fail(where, "a reject row has no 'to' and no 'do'", "reject")
            reject = reject if reject is None else f.text(where, reject, "reject")
        params = self.events[event].params if event in self.events else ()
        scope = self._scope(dict(params))
        guard_text = r.get("guard")
        guard: Expr = Lit(True)
        stmts: tuple[Stmt, ...] = ()
        if event in self.events:  # else its parameters are unknown: a guard may name them
            with f.each():
                if guard_text is not None:
                    text = f.text(where, guard_text, "guard")
                    guard = _bool_expr(f, where, text, scope, "guard")
            with f.each():
                stmts = _stmts(
                    f, where, r.get("do", []), scope, self.var_types, self.state_var, self.effects
                )
        tags: tuple[str, ...] = ()
        with f.each():
            tags = self._tags(where, r)
        doc = ""
        with f.each():
            doc = f.text(where, r.get("doc", ""), "doc")
        if len(f.faults) > found:
            return None
        return Row(
            id=rid, event=event, sources=sources, guard=guard, guard_text=guard_text,
            target=target, reject=reject, effects=stmts, clauses=tags, doc=doc,
        )  # fmt: skip

    def _pair_rules(self) -> tuple[PairRule, ...]:
        f = self.f
        pair_rules: list[PairRule] = []
        kinds: tuple[Literal["ignored"], Literal["rejected"]] = ("ignored", "rejected")
        for kind in kinds:
            for i, body in enumerate(_array(f, self.data, kind)):
                with f.each():
                    where = f"{kind}[{i}]"
                    p = f.keys(where, body, ["on", "in", "why"], ["clauses"])
                    on = f.names(where, p["on"], "on")
                    for event_name in on:
                        if event_name not in self.events:
                            f.fail(
                                where,
                                f"unknown event {echo(event_name)} "
                                f"({did_you_mean(event_name, self.events)}events: "
                                f"{known(self.events)})",
                                "on",
                            )
                    states_in = self._state_names(where, p["in"], "in")
                    why = f.text(where, p["why"], "why")
                    pair_rules.append(PairRule(kind, i, on, states_in, why, self._tags(where, p)))
        return tuple(pair_rules)

    def _invariants(self) -> tuple[tuple[Invariant, ...], tuple[Stability, ...]]:
        f = self.f
        invariants: list[Invariant] = []
        stable: list[Stability] = []
        seen: dict[str, int] = {}
        for i, body in enumerate(_array(f, self.data, "invariants")):
            with f.each(), f.at("invariants", i):
                raw_id = body.get("id") if isinstance(body, dict) else None
                where = f"invariant {echo(raw_id)}" if _is_id(raw_id) else f"invariants[{i}]"
                step_form = isinstance(body, dict) and "unchanged" in body
                required = (
                    ["id", "unchanged", "while", "doc"] if step_form else ["id", "holds", "doc"]
                )
                inv = f.keys(where, body, required, ["clauses"])
                iid = f.id(where, inv["id"])
                if iid in seen:
                    first = f.first_seen("invariants", seen[iid])
                    f.fail(where, f"duplicate invariant id: invariants[{i}] repeats {first}", "id")
                seen[iid] = i
                if step_form:
                    stability = self._stability(where, iid, inv)
                    if stability is not None:
                        stable.append(stability)
                else:
                    invariant = self._invariant(where, iid, inv)
                    if invariant is not None:
                        invariants.append(invariant)
        return tuple(invariants), tuple(stable)

    def _invariant(self, where: str, iid: str, inv: Mapping[str, Any]) -> Invariant | None:
        """The state invariant ``inv``, or None after recording each of its keys' faults (its
        predicate, doc and tags are read apart, as a row's keys are)."""
        f = self.f
        found = len(f.faults)
        text, predicate = self._predicate(where, inv, "holds")
        doc, tags = self._described(where, inv)
        if len(f.faults) > found:
            return None
        return Invariant(iid, predicate, text, doc, tags)

    def _stability(self, where: str, iid: str, inv: Mapping[str, Any]) -> Stability | None:
        """The step invariant ``inv`` (``unchanged`` ``while``), or None after recording each
        of its keys' faults."""
        f = self.f
        found = len(f.faults)
        var = ""
        with f.each():
            var = f.text(where, inv["unchanged"], "unchanged")
            if var not in self.var_types or var == self.state_var:
                names = [n for n in self.var_types if n != self.state_var]
                f.fail(
                    where,
                    f"unknown variable {echo(var)} in unchanged "
                    f"({did_you_mean(var, names)}variables: {known(names)})",
                    "unchanged",
                )
        text, predicate = self._predicate(where, inv, "while")
        doc, tags = self._described(where, inv)
        if len(f.faults) > found:
            return None
        return Stability(iid, var, predicate, text, doc, tags)

    def _predicate(self, where: str, inv: Mapping[str, Any], key: str) -> tuple[str, Expr]:
        """An invariant's predicate at ``key`` (``holds``, ``while``): its text and expression
        (a fault is recorded, and ``true`` stands in)."""
        text = ""
        predicate: Expr = Lit(True)
        with self.f.each():
            text = self.f.text(where, inv[key], key)
            predicate = _bool_expr(self.f, where, text, self.base, key)
        return text, predicate

    def _described(self, where: str, inv: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
        """An invariant's doc and clauses, each read apart (a fault in either is recorded)."""
        f = self.f
        doc = ""
        tags: tuple[str, ...] = ()
        with f.each():
            doc = f.text(where, inv["doc"], "doc")
        with f.each():
            tags = self._tags(where, inv)
        return doc, tags


def _constant(f: _File, name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        f.fail(f"constant {echo(name)}", f"a constant is an integer, not {echo(value)}")
    if abs(value) > MAX_INT:
        f.fail(f"constant {echo(name)}", f"{echo(value)} is over the limit of {MAX_INT:,}")
    return value


def _over(what: str, limit: str, value: int) -> str:
    """The fault of a size over one of :class:`Limits`, saying how a model raises it."""
    return (
        f"{what}, over the limit of {value:,} "
        f"(a model may raise it: [model] limits = {{ {limit} = N }})"
    )


def _is_id(value: object) -> bool:
    return isinstance(value, str) and ID.fullmatch(value) is not None


def _array(f: _File, data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        f.fail(f"[[{key}]]", f"{key} must be an array of tables ([[{key}]])")
    return value


def _bool_expr(f: _File, where: str, text: str, scope: Scope, key: str | None = None) -> Expr:
    """``text``, a boolean expression over ``scope``; a fault names ``where`` at ``key``."""
    try:
        expr, t = check(parse_expr(text), scope)
    except ExprError as e:
        f.fail(where, f"{e} in {echo(text)}", key)
    if t.kind != "bool":
        f.fail(where, f"type mismatch: expected a boolean, found {t} in {echo(text)}", key)
    return expr


def _stmts(
    f: _File,
    where: str,
    items: object,
    scope: Scope,
    var_types: Mapping[str, Type],
    state_var: str,
    effects: Mapping[str, EffectSpec],
) -> tuple[Stmt, ...]:
    if not isinstance(items, list):
        f.fail(where, "do must be a list of effects", "do")
    out: list[Stmt] = []
    for item in items:
        if isinstance(item, dict):
            b = f.keys(where, item, ["when", "do"])
            when = _bool_expr(f, where, f.text(where, b["when"], "when"), scope, "do")
            out.append(Block(when, _stmts(f, where, b["do"], scope, var_types, state_var, effects)))
            continue
        text = f.text(where, item, "an effect")
        try:
            stmt = parse_stmt(text)
            match stmt:
                case Assign(var=v, value=value):
                    if v == state_var:
                        raise ExprError(f"{state_var} changes only through 'to'")
                    if v not in var_types:
                        names = [n for n in var_types if n != state_var]
                        raise ExprError(
                            f"unknown variable {echo(v)} ({did_you_mean(v, names)}variables: "
                            f"{known(names)})"
                        )
                    out.append(Assign(v, check_stmt_value(value, var_types[v], scope, v)))
                case Call(effect=name, args=args):
                    if name not in effects:
                        raise ExprError(
                            f"unknown effect {echo(name)} ({did_you_mean(name, effects)}effects: "
                            f"{known(effects)})"
                        )
                    params = effects[name].params
                    if len(args) != len(params):
                        raise ExprError(f"{name} takes {len(params)} argument(s), got {len(args)}")
                    out.append(
                        Call(
                            name,
                            tuple(
                                check_stmt_value(a, t, scope, p, effect=name)
                                for a, (p, t) in zip(args, params, strict=True)
                            ),
                        )
                    )
        except ExprError as e:
            f.fail(where, f"{e} in {echo(text)}", "do")
    return tuple(out)


# --- validation over the finite domain -----------------------------------------------------------


def _validate(f: _File, m: Machine, limits: Limits, *, exhaustive: bool) -> None:
    t = m.table
    used = {name for row in t.rows for name in _calls(row.effects)}
    for name in t.effects:
        if name not in used:
            with f.each():
                f.fail(f"effect {echo(name)}", "declared but no row performs it")

    referenced = {name for expr in _expressions(t) for name in _defs_in(expr)}
    for name in t.defs:
        if name != "quiescent" and name not in referenced:
            with f.each():
                f.fail(f"def {echo(name)}", "defined but no row, definition or invariant uses it")

    for bad in m.violated(m.initial):
        with f.each():
            f.fail(
                f"invariant {echo(bad)}",
                f"does not hold in the initial state {m.format_state(m.initial)}",
            )

    handled = {(s, r.event): r.id for r in t.rows for s in r.sources}
    listed: dict[tuple[str, str], str] = {}
    for rule in t.pair_rules:
        for s in rule.states:
            for e in rule.events:
                where = f"{rule.kind}[{rule.index}]"
                with f.each():
                    if (s, e) in handled:
                        pair = f"({s}, {e}) is also handled by row {echo(handled[(s, e)])}"
                        f.fail(where, pair, "in")
                    if (s, e) in listed:
                        f.fail(where, f"({s}, {e}) is already listed by {listed[(s, e)]}", "in")
                listed[(s, e)] = where
    for s in t.state_names:
        for e in t.events:
            if (s, e) not in handled and (s, e) not in listed:
                fault = (
                    f"unhandled pair ({s}, {e}): add a row, or list it [[ignored]] or [[rejected]]"
                )
                with f.each():
                    f.fail(f"event {echo(e)}", fault)
    # The search over the domain below stops at its first fault: one wrong guard can make
    # thousands of cases fail.
    f.done()

    if not exhaustive:
        return
    _domain_fits(f, t, limits)
    if domain_holds(m):
        return  # the generated search found no fault; else the search below finds and names it
    valuations = list(itertools.product(*(v.type.values for v in t.variables)))
    in_domain: set[tuple[Value, ...]] = set()  # stores found inside every variable's domain
    for s in t.state_names:
        states = [(s, *vals) for vals in valuations]
        valid = [st for st in states if not m.violated(st)]
        valid_states = set(valid)
        for e, spec in t.events.items():
            if (s, e) not in handled:
                continue
            arguments = list(m.all_arguments(e))
            for st in states:
                for args in arguments:
                    rows = m.enabled(st, e, args)
                    if len(rows) > 1:
                        a, b = rows[0].row.id, rows[1].row.id
                        f.fail(
                            f"row {echo(b)}",
                            f"rows {echo(a)} and {echo(b)} are both enabled for "
                            f"{e}({show_args(m, e, args)}) in {m.format_state(st)}",
                        )
                    if rows and rows[0].row.reject is None:
                        _check_result(
                            f, m, rows[0].row, st, args, valid=st in valid_states, seen=in_domain
                        )
            if spec.kind == "input":
                for st in valid:
                    for args in arguments:
                        if not m.enabled(st, e, args):
                            f.fail(
                                f"event {echo(e)}",
                                f"input event not handled: no row is enabled for "
                                f"{e}({show_args(m, e, args)}) in {m.format_state(st)}",
                            )


def _domain_fits(f: _File, t: Table, limits: Limits) -> None:
    """The cases :func:`_validate` checks stay within ``limits.domain``: every event, with
    every argument tuple, against each row that may take it, in every state of the domain.
    Else name the largest factor (a variable's values, an event's argument tuples, or the
    rows of one state and event) with the whole count."""
    valuations = math.prod(len(v.type.values) for v in t.variables)
    arguments = {e: math.prod(len(ty.values) for _, ty in s.params) for e, s in t.events.items()}
    rows: dict[tuple[str, str], int] = {}
    for row in t.rows:
        for source in row.sources:
            rows[(source, row.event)] = rows.get((source, row.event), 0) + 1
    total = valuations * sum(
        arguments[e] * max(1, rows.get((s, e), 0)) for s in t.state_names for e in t.events
    )
    if total <= limits.domain:
        return
    factors = [
        (len(v.type.values), f"var {echo(v.name)}", f"{v.type} has {len(v.type.values):,} values")
        for v in t.variables
    ]
    factors += [(n, f"event {echo(e)}", f"{n:,} argument tuples") for e, n in arguments.items()]
    factors += [
        (n, f"event {echo(e)}", f"{n:,} rows take it in state {s}") for (s, e), n in rows.items()
    ]
    _, where, fault = max(factors, key=lambda factor: factor[0])
    f.fail(
        where,
        _over(f"{fault}, so the loader would check {total:,} cases", "domain", limits.domain),
    )


def _check_result(
    f: _File,
    m: Machine,
    row: Row,
    state: State,
    args: tuple[Value, ...],
    *,
    valid: bool,
    seen: set[tuple[Value, ...]],
) -> None:
    """Every value a row assigns or passes to an effect stays inside its declared domain.

    From a ``valid`` state (one the invariants admit) every effect's ``requires`` must hold as
    it runs, and no step invariant may break between two moments a listener observes (each
    notifying effect and the row's end), as the model checker checks them.

    ``seen`` holds the stores already found inside the domain, shared by every call of one
    table's validation: a table's rows reach few distinct stores, each checked once.
    """
    t = m.table
    store = list(state)
    observed = [tuple(store)]

    def stable(moment: str) -> None:
        now = tuple(store)
        if now == observed[0]:
            return  # a step invariant breaks only where a variable changed
        for sid in m.unstable(observed[0], now):
            f.fail(
                f"row {echo(row.id)}",
                f"breaks invariant {echo(sid)} (from {m.format_state(state)}{moment})",
            )
        observed[0] = now

    def in_domain(moment: str) -> None:
        now = tuple(store)
        if now in seen:
            return
        for var, value in zip(t.variables, store[1:], strict=True):
            if value not in var.type.values:
                f.fail(
                    f"row {echo(row.id)}",
                    f"out-of-domain assignment: {var.name} becomes {echo(value)}, "
                    f"not in {var.type} (from {m.format_state(state)}{moment})",
                )
        seen.add(now)

    def perform(name: str, values: tuple[Value, ...]) -> None:
        for (p, ptype), v in zip(t.effects[name].params, values, strict=True):
            if v not in ptype.values:
                f.fail(
                    f"row {echo(row.id)}",
                    f"out-of-domain argument: {name}({p}={echo(v)}) in {m.format_state(state)}",
                )
        # Listeners inside the effect see the store as it is now, not as the row leaves it.
        in_domain(f", when {name} runs")
        if valid:
            if m.unmet(name, store, values):
                shown = ", ".join(show(v) for v in values)
                f.fail(
                    f"row {echo(row.id)}",
                    f"{name}({shown}) requires {t.effects[name].requires_text}, which does not "
                    f"hold when it runs (from {m.format_state(state)})",
                )
            if t.effects[name].notifies:
                stable(f", when {name} runs")

    m.execute(m.rows[row.id], store, args, perform)
    in_domain("")
    if valid:
        stable("")


def _expressions(t: Table) -> Iterable[Expr]:
    """Every expression of a table: guards, effect expressions, definitions, invariants."""
    for row in t.rows:
        yield row.guard
        yield from _stmt_expressions(row.effects)
    for d in t.defs.values():
        yield d.expr
    for inv in t.invariants:
        yield inv.expr


def _stmt_expressions(stmts: Sequence[Stmt]) -> Iterable[Expr]:
    for s in stmts:
        match s:
            case Assign(value=value):
                yield value
            case Call(args=args):
                yield from args
            case Block(when=when, body=body):
                yield when
                yield from _stmt_expressions(body)


def _defs_in(e: Expr) -> Iterable[str]:
    match e:
        case Def(name=n):
            yield n
        case Not(operand=o) | In(operand=o):
            yield from _defs_in(o)
        case BinOp(left=left, right=right):
            yield from _defs_in(left)
            yield from _defs_in(right)
        case Cond(test=c, then=a, orelse=b):
            for part in (c, a, b):
                yield from _defs_in(part)


def _calls(stmts: Sequence[Stmt]) -> Iterable[str]:
    for s in stmts:
        if isinstance(s, Call):
            yield s.effect
        elif isinstance(s, Block):
            yield from _calls(s.body)


__all__ = ["load_clauses", "load_table", "read_toml", "unparse"]
