"""A bad table is rejected whole, with one error type naming the file, the place and the fault.

Every case starts from ``BASE``, a small valid table (a job that a waking submit starts, a
cancel aborts and a finish settles), makes one small textual edit, and pins the full message
``FILE: WHERE: FAULT`` that :func:`fsm_core.table.load_spec` raises as :class:`SpecError`.
"""

from __future__ import annotations

import importlib
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fsm_core import SpecError, load_spec
from tests.helpers import copy_specs, exactly
from tests.helpers import edit as shared_edit

BASE = """\
# A tiny cancel protocol: a waking submit starts a job, cancel aborts it, finish settles.

[machine]
name = "t"
title = "A tiny cancel protocol"
state_var = "phase"
initial = "idle"

[states]
idle = { doc = "No job runs." }
busy = { doc = "A job runs under a live holder." }
stopping = { doc = "The job's holder was aborted; the job is winding down." }

[types]
holder = ["none", "live", "aborted"]
cause = ["user", "parent"]

[vars]
holder = { type = "holder", init = "none", doc = "The running job's holder." }
queued = { type = "bool", init = false, doc = "True iff work waits for a later wake." }
count = { type = "int[0..2]", init = 0, doc = "Jobs finished, saturating at 2." }

[defs]
quiescent = { expr = "phase == idle and holder == none", doc = "Nothing runs." }

[events.submit]
kind = "input"
params = { wake = "bool" }

[events.cancel]
kind = "input"
params = { cause = "cause" }

[events.finish]
kind = "internal"

[effects.start_job]
doc = "Start the job."

[effects.notify_cancel]
params = { cause = "cause" }
notifies = true

[effects.settle]

[[rows]]
id = "submit.idle"
on = "submit"
from = ["idle"]
guard = "wake"
to = "busy"
do = ["holder := live", "queued := false", "start_job()"]
clauses = ["C.start"]

[[rows]]
id = "submit.quiet"
on = "submit"
from = ["idle"]
guard = "not wake"
do = ["queued := true"]
clauses = ["C.queue"]

[[rows]]
id = "submit.busy"
on = "submit"
from = ["busy"]
do = ["queued := true"]
clauses = ["C.queue"]

[[rows]]
id = "submit.stopping"
on = "submit"
from = ["stopping"]
reject = "the job is stopping"
clauses = ["C.cancel"]

[[rows]]
id = "cancel.busy"
on = "cancel"
from = ["busy"]
guard = "holder == live"
to = "stopping"
do = ["notify_cancel(cause)", { when = "holder == live", do = ["holder := aborted"] }]
clauses = ["C.cancel"]

[[rows]]
id = "finish.done"
on = "finish"
from = ["busy"]
to = "idle"
do = [
  "holder := none",
  "count := if count < 2 then count + 1 else count",
  { when = "quiescent", do = ["settle()"] },
]
clauses = ["C.settle"]

[[rows]]
id = "finish.stopped"
on = "finish"
from = ["stopping"]
to = "idle"
do = ["holder := none", "settle()"]
clauses = ["C.settle"]

[[ignored]]
on = ["cancel"]
in = ["idle", "stopping"]
why = "Nothing live to cancel."
clauses = ["C.cancel"]

[[rejected]]
on = ["finish"]
in = ["idle"]
why = "no job runs"
clauses = ["C.settle"]

[[invariants]]
id = "idle_holds_nothing"
holds = "phase == idle implies holder == none"
doc = "An idle machine has no holder."
clauses = ["C.settle"]

[[invariants]]
id = "busy_is_live"
holds = "phase == busy implies holder == live"
doc = "A running job's holder is live."
clauses = ["C.start"]

[[invariants]]
id = "stopping_is_aborted"
holds = "phase == stopping implies holder == aborted"
doc = "A stopping job's holder was aborted."
clauses = ["C.cancel"]
"""

CLAUSES = """\
[sources]
S = "sources/seed.txt"

[clauses."C.start"]
source = "S"
quote = "A waking submit starts a job."
summary = "A wake starts a job."

[clauses."C.queue"]
source = "S"
quote = "Any other submit only queues."
summary = "Anything else queues."

[clauses."C.cancel"]
source = "S"
quote = "A cancel aborts the running job."
summary = "Cancel aborts."

[clauses."C.settle"]
source = "S"
quote = "A finished job settles its waiters."
summary = "Finishing settles."
"""

# Line breaks differ from the quotes on purpose: quotes match modulo whitespace.
SOURCE = """\
A waking submit starts a job. Any other submit
only queues. A cancel aborts the running job.
A finished job settles its waiters.
"""


def write_specs(root: Path, tables: dict[str, str] | None = None, clauses: str = CLAUSES) -> Path:
    """Write ``root/specs`` (tables by file name, the catalogue and its source); return it."""
    specs = root / "specs"
    (specs / "sources").mkdir(parents=True)
    (specs / "sources" / "seed.txt").write_text(SOURCE, encoding="utf-8")
    (specs / "clauses.toml").write_text(clauses, encoding="utf-8")
    for name, text in (tables if tables is not None else {"t.toml": BASE}).items():
        (specs / name).write_text(text, encoding="utf-8")
    return specs


def edit(text: str, old: str, new: str) -> str:
    """``text`` with the one occurrence of ``old`` replaced by ``new``."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def test_the_base_table_loads_and_runs(tmp_path: Path) -> None:
    spec = load_spec(write_specs(tmp_path))
    assert sorted(spec.clauses) == ["C.cancel", "C.queue", "C.settle", "C.start"]
    t = spec.machines["t"]
    assert t.names == ("phase", "holder", "queued", "count")
    step = t.fire(t.initial, "submit", wake=True)
    assert (step.row, step.target) == ("submit.idle", ("busy", "live", False, 0))
    step = t.fire(step.target, "cancel", cause="user")
    assert [str(e) for e in step.effects] == ["notify_cancel(user)"]
    assert t.fire(step.target, "finish").target == ("idle", "none", False, 0)


# Each case: (old text of BASE, its replacement, the whole message load_spec raises).
TABLE_FAULTS = [
    pytest.param(
        'from = ["idle"]\nguard = "wake"',
        'from = ["idel"]\nguard = "wake"',
        "specs/t.toml:49: row 'submit.idle': "
        "unknown state 'idel' in from (did you mean 'idle'? states: idle, busy, stopping)",
        id="unknown-state-in-from",
    ),
    pytest.param(
        'to = "busy"',
        'to = "bsy"',
        "specs/t.toml:51: row 'submit.idle': unknown state 'bsy' in to (did you mean "
        "'busy'? states: idle, busy, stopping)",
        id="unknown-state-in-to",
    ),
    pytest.param(
        'in = ["idle", "stopping"]',
        'in = ["idle", "stoping"]',
        "specs/t.toml:108: ignored[0]: unknown state 'stoping' in in (did you mean "
        "'stopping'? states: idle, busy, stopping)",
        id="unknown-state-in-ignored",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holdr == live"',
        "specs/t.toml:81: row 'cancel.busy': unknown name 'holdr' (did you mean 'holder'?) "
        "in 'holdr == live'",
        id="unknown-variable-in-guard",
    ),
    pytest.param(
        'from = ["busy"]\ndo = ["queued := true"]',
        'from = ["busy"]\ndo = ["queud := true"]',
        "specs/t.toml:67: row 'submit.busy': "
        "unknown variable 'queud' (did you mean 'queued'? variables: holder, queued, "
        "count) in 'queud := true'",
        id="unknown-variable-assigned",
    ),
    pytest.param(
        'on = "finish"\nfrom = ["stopping"]',
        'on = "finnish"\nfrom = ["stopping"]',
        "specs/t.toml:100: row 'finish.stopped': "
        "unknown event 'finnish' (did you mean 'finish'? events: submit, cancel, finish)",
        id="unknown-event",
    ),
    pytest.param(
        '"start_job()"',
        '"strat_job()"',
        "specs/t.toml:52: row 'submit.idle': "
        "unknown effect 'strat_job' (did you mean 'start_job'? effects: start_job, "
        "notify_cancel, settle) in 'strat_job()'",
        id="unknown-effect",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holder == true"',
        "specs/t.toml:81: row 'cancel.busy': "
        "type mismatch: cannot compare holder with bool in 'holder == true'",
        id="type-mismatch-enum-with-bool",
    ),
    pytest.param(
        '"count := if count < 2 then count + 1 else count"',
        '"count := if count < 2 then count + holder else count"',
        "specs/t.toml:91: row 'finish.done': type mismatch: '+' needs integers, "
        "not int[0..2] and holder in 'count := if count < 2 then count + holder else count'",
        id="type-mismatch-int-plus-enum",
    ),
    pytest.param(
        '"holder := aborted"',
        '"holder := cause"',
        "specs/t.toml:83: row 'cancel.busy': out-of-domain assignment: holder := cause may give "
        "user, parent, not in holder (none, live, aborted) in 'holder := cause'",
        id="enum-assignment-out-of-domain",
    ),
    pytest.param(
        '"notify_cancel(cause)"',
        '"notify_cancel(holder)"',
        "specs/t.toml:83: row 'cancel.busy': out-of-domain argument: notify_cancel(cause=holder) "
        "may give none, live, aborted, not in cause (user, parent) in 'notify_cancel(holder)'",
        id="enum-argument-out-of-domain",
    ),
    pytest.param(
        '"holder := none", "settle()"',
        '"holder := none", "settle()", "count := count + 1"',
        "specs/t.toml:98: row 'finish.stopped': out-of-domain assignment: count becomes 3, "
        "not in int[0..2] (from stopping{holder=none, queued=false, count=2})",
        id="int-assignment-overflows-its-range",
    ),
    pytest.param(
        '"count := if count < 2 then count + 1 else count",\n'
        '  { when = "quiescent", do = ["settle()"] },\n',
        '"count := count + 1",\n'
        '  { when = "quiescent", do = ["settle()"] },\n'
        '  "count := count - 1",\n',
        "specs/t.toml:86: row 'finish.done': out-of-domain assignment: count becomes 3, not in "
        "int[0..2] (from busy{holder=none, queued=false, count=2}, when settle runs)",
        id="int-overflow-seen-by-a-listener",
    ),
    pytest.param(
        'id = "submit.quiet"',
        'id = "submit.idle"',
        "specs/t.toml:56: row 'submit.idle': duplicate row id: rows[1] repeats rows[0] (line 47)",
        id="duplicate-row-id",
    ),
    pytest.param(
        'id = "stopping_is_aborted"',
        'id = "busy_is_live"',
        "specs/t.toml:131: invariant 'busy_is_live': "
        "duplicate invariant id: invariants[2] repeats invariants[1] (line 125)",
        id="duplicate-invariant-id",
    ),
    pytest.param(
        'guard = "not wake"',
        'guard = "not queued"',
        "specs/t.toml:55: row 'submit.quiet': rows 'submit.idle' and 'submit.quiet' are both "
        "enabled for submit(wake=true) in idle{holder=none, queued=false, count=0}",
        id="two-rows-enabled-together",
    ),
    pytest.param(
        '[[rejected]]\non = ["finish"]\nin = ["idle"]\nwhy = "no job runs"\n'
        'clauses = ["C.settle"]\n',
        "",
        "specs/t.toml:34: event 'finish': "
        "unhandled pair (idle, finish): add a row, or list it [[ignored]] or [[rejected]]",
        id="unhandled-pair",
    ),
    pytest.param(
        'in = ["idle", "stopping"]',
        'in = ["idle", "busy", "stopping"]',
        "specs/t.toml:108: ignored[0]: (busy, cancel) is also handled by row 'cancel.busy'",
        id="pair-both-handled-and-ignored",
    ),
    pytest.param(
        'on = ["finish"]',
        'on = ["finish", "cancel"]',
        "specs/t.toml:114: rejected[0]: (idle, cancel) is already listed by ignored[0]",
        id="pair-both-ignored-and-rejected",
    ),
    pytest.param(
        'from = ["busy"]\ndo = ["queued := true"]',
        'from = ["busy", "busy"]\ndo = ["queued := true"]',
        "specs/t.toml:66: row 'submit.busy': from lists 'busy' twice",
        id="state-listed-twice-in-from",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holder == live and queued"',
        "specs/t.toml:30: event 'cancel': input event not handled: no row is enabled for "
        "cancel(cause=user) in busy{holder=live, queued=false, count=0}",
        id="input-event-not-handled-in-a-valid-state",
    ),
    pytest.param(
        'guard = "wake"',
        'guard = "(wake"',
        "specs/t.toml:50: row 'submit.idle': unexpected end of expression, expected ')' in '(wake'",
        id="malformed-unbalanced-paren",
    ),
    pytest.param(
        'guard = "not wake"',
        'guard = "not wake and"',
        "specs/t.toml:59: row 'submit.quiet': "
        "unexpected end of expression, expected a name in 'not wake and'",
        id="malformed-dangling-operator",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holder = live"',
        "specs/t.toml:81: row 'cancel.busy': unexpected character '=' at column 8 in "
        "'holder = live'",
        id="malformed-unexpected-character",
    ),
    pytest.param(
        'from = ["busy"]\ndo = ["queued := true"]\nclauses = ["C.queue"]\n',
        'from = ["busy"]\ndo = ["queued := true"]\n',
        "specs/t.toml:63: row 'submit.busy': "
        "missing clause tag (every row and invariant names the clause it implements)",
        id="missing-clause-tag",
    ),
    pytest.param(
        'holds = "phase == busy implies holder == live"\n'
        'doc = "A running job\'s holder is live."\n'
        'clauses = ["C.start"]',
        'holds = "phase == busy implies holder == live"\n'
        'doc = "A running job\'s holder is live."\n'
        "clauses = []",
        "specs/t.toml:128: invariant 'busy_is_live': "
        "missing clause tag (every row and invariant names the clause it implements)",
        id="empty-clause-tag-list",
    ),
    pytest.param(
        '"start_job()"]\nclauses = ["C.start"]',
        '"start_job()"]\nclauses = ["C.strat"]',
        "specs/t.toml:53: row 'submit.idle': unknown clause 'C.strat' (did you mean "
        "'C.start'? see specs/clauses.toml)",
        id="unknown-clause-tag",
    ),
    pytest.param(
        'guard = "holder == live"',
        'gaurd = "holder == live"',
        "specs/t.toml:81: row 'cancel.busy': unknown key 'gaurd' "
        "(did you mean 'guard'? expected one of: clauses, do, doc, from, guard, id, on, "
        "reject, to)",
        id="unknown-key",
    ),
    pytest.param(
        'on = "cancel"\n',
        "",
        "specs/t.toml:77: row 'cancel.busy': missing key 'on'",
        id="missing-required-key",
    ),
    pytest.param(
        '"holder := none", "settle()"',
        '"phase := idle", "settle()"',
        "specs/t.toml:103: row 'finish.stopped': phase changes only through 'to' in 'phase "
        ":= idle'",
        id="state-variable-assigned-in-do",
    ),
    pytest.param(
        '"notify_cancel(cause)"',
        '"notify_cancel()"',
        "specs/t.toml:83: row 'cancel.busy': "
        "notify_cancel takes 1 argument(s), got 0 in 'notify_cancel()'",
        id="effect-given-too-few-arguments",
    ),
    pytest.param(
        '"start_job()"',
        '"start_job(wake)"',
        "specs/t.toml:52: row 'submit.idle': "
        "start_job takes 0 argument(s), got 1 in 'start_job(wake)'",
        id="effect-given-too-many-arguments",
    ),
    pytest.param(
        "[effects.settle]\n",
        '[effects.settle]\n\n[effects.log]\ndoc = "Write a log line."\n',
        "specs/t.toml:46: effect 'log': declared but no row performs it",
        id="effect-never-performed",
    ),
    pytest.param(
        'init = "none"',
        'init = "live"',
        "specs/t.toml:118: invariant 'idle_holds_nothing': "
        "does not hold in the initial state idle{holder=live, queued=false, count=0}",
        id="invariant-fails-in-the-initial-state",
    ),
    pytest.param(
        "[vars]\n",
        '[vars]\nlive = { type = "bool", init = false }\n',
        "specs/t.toml:19: var 'live': 'live' is both a variable and an enumeration value",
        id="name-is-variable-and-enum-value",
    ),
    pytest.param(
        "[vars]\n",
        '[vars]\nphase = { type = "bool", init = false }\n',
        "specs/t.toml:19: var 'phase': 'phase' is the state variable; [machine] declares it",
        id="state-variable-redeclared",
    ),
    pytest.param(
        "[types]\n",
        '[types]\nphase = ["on", "off"]\n',
        "specs/t.toml:15: type 'phase': 'phase' is the state variable's type; its values are the "
        "[states]",
        id="state-variable-type-redeclared",
    ),
    pytest.param(
        'params = { wake = "bool" }',
        'params = { wake = "bool", queued = "bool" }',
        "specs/t.toml:26: event 'submit': parameter 'queued' shadows a variable or "
        "enumeration value",
        id="parameter-shadows-variable",
    ),
    pytest.param(
        'params = { wake = "bool" }',
        'params = { wake = "bool", quiescent = "bool" }',
        "specs/t.toml:26: event 'submit': parameter 'quiescent' shadows the definition 'quiescent'",
        id="parameter-shadows-definition",
    ),
    pytest.param(
        'count = { type = "int[0..2]", init = 0,',
        'count = { type = "int[0..2]", init = 3,',
        "specs/t.toml:21: var 'count': init 3 is not a value of int[0..2]",
        id="init-outside-its-range",
    ),
    pytest.param(
        'title = "A tiny cancel protocol"',
        'title = "A tiny cancel protocol',
        "specs/t.toml: not valid TOML: Illegal character '\\n' (at line 5, column 32)",
        id="invalid-toml",
    ),
    pytest.param(
        "quiescent = { expr",
        "quiet = { expr",
        "specs/t.toml:23: [defs]: missing definition 'quiescent' (the states where nothing runs)",
        id="missing-quiescent-definition",
    ),
    pytest.param(
        'reject = "the job is stopping"',
        'reject = "the job is stopping"\ndo = ["queued := true"]',
        "specs/t.toml:74: row 'submit.stopping': a reject row has no 'to' and no 'do'",
        id="reject-row-with-effects",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holder in {live, dead}"',
        "specs/t.toml:81: row 'cancel.busy': 'dead' is not a value of holder "
        "(values: none, live, aborted) in 'holder in {live, dead}'",
        id="in-set-outside-the-domain",
    ),
    pytest.param(
        "[defs]\n",
        '[defs]\nbusy_live = { expr = "phase == busy and holder == live" }\n',
        "specs/t.toml:24: def 'busy_live': defined but no row, definition or invariant uses it",
        id="unused-definition",
    ),
    pytest.param(
        'count = { type = "int[0..2]"',
        'count = { type = "int[0..N]"',
        "specs/t.toml:21: var 'count': unknown constant 'N' in an integer range",
        id="unknown-constant-in-a-range",
    ),
    pytest.param(
        'count = { type = "int[0..2]"',
        'count = { type = "int[0..\u0662]"',
        "specs/t.toml:21: var 'count': the range bound '\u0662' is neither an integer in ASCII "
        "digits nor a constant name",
        id="arabic-indic-digit-in-a-range",
    ),
    pytest.param(
        'count = { type = "int[0..2]"',
        'count = { type = "int[\uff10..2]"',
        "specs/t.toml:21: var 'count': the range bound '\uff10' is neither an integer in ASCII "
        "digits nor a constant name",
        id="fullwidth-digit-in-a-range",
    ),
    pytest.param(
        'from = ["idle"]\nguard = "wake"',
        'from = ["\\u001b[2Jidle"]\nguard = "wake"',
        "specs/t.toml:49: row 'submit.idle': "
        "unknown state '\\x1b[2Jidle' in from (did you mean 'idle'? states: idle, busy, stopping)",
        id="escape-sequence-in-a-name-is-quoted-escaped",
    ),
    pytest.param(
        'idle = { doc = "No job runs." }',
        'idle = { doc = "No job \\u001b[31mruns." }',
        "specs/t.toml:10: state 'idle': doc holds the non-printing character '\\x1b' at position 7 "
        "(a table is plain text; newlines and tabs are allowed)",
        id="escape-sequence-in-a-doc",
    ),
    pytest.param(
        'idle = { doc = "No job runs." }',
        'idle = { doc = "No job \\u202eruns." }',
        "specs/t.toml:10: state 'idle': doc holds the non-printing character '\\u202e' at "
        "position 7 "
        "(a table is plain text; newlines and tabs are allowed)",
        id="bidi-override-in-a-doc",
    ),
    pytest.param(
        'id = "submit.quiet"',
        'id = "submit.quiet\\nimport os"',
        "specs/t.toml:56: rows[1]: id 'submit.quiet\\nimport os' is not a valid id "
        "(lower_snake_case words joined by dots, e.g. send.idle.wake)",
        id="row-id-not-an-id",
    ),
    pytest.param(
        'id = "submit.quiet"',
        "id = 7",
        "specs/t.toml:56: rows[1]: id 7 is not a valid id "
        "(lower_snake_case words joined by dots, e.g. send.idle.wake)",
        id="row-id-not-a-string",
    ),
    pytest.param(
        'id = "busy_is_live"',
        'id = "busy is live"',
        "specs/t.toml:125: invariants[1]: id 'busy is live' is not a valid id "
        "(lower_snake_case words joined by dots, e.g. send.idle.wake)",
        id="invariant-id-not-an-id",
    ),
    pytest.param(
        'name = "t"',
        'name = "t/u"',
        "specs/t.toml:3: [machine]: 't/u' is not a valid name (lower_snake_case, not a keyword)",
        id="machine-name-not-a-name",
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), TABLE_FAULTS)
def test_a_faulty_table_is_rejected_naming_file_place_and_fault(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    specs = write_specs(tmp_path, {"t.toml": edit(BASE, old, new)})
    with pytest.raises(SpecError, match=exactly(message)):
        load_spec(specs)


CATALOGUE_FAULTS = [
    pytest.param(
        'quote = "A cancel aborts the running job."',
        'quote = "A cancel stops the running job."',
        "specs/clauses.toml:16: clause 'C.cancel': quote not found verbatim in sources/seed.txt",
        id="quote-not-verbatim",
    ),
    pytest.param(
        'S = "sources/seed.txt"',
        'S = "sources/sed.txt"',
        "specs/clauses.toml:2: source 'S': sources/sed.txt: file not found",
        id="source-file-missing",
    ),
    pytest.param(
        '[clauses."C.settle"]\nsource = "S"',
        '[clauses."C.settle"]\nsource = "T"',
        "specs/clauses.toml:20: clause 'C.settle': unknown source 'T' (sources: S)",
        id="unknown-source",
    ),
    pytest.param(
        '[clauses."C.settle"]',
        '[clauses."C settle"]',
        "specs/clauses.toml:19: [clauses]: clause id 'C settle' is not a valid id (letters, "
        "digits and _ in words joined by . or -, e.g. S000.first-wins)",
        id="clause-id-not-an-id",
    ),
    pytest.param(
        'S = "sources/seed.txt"',
        'S = "../specs/sources/seed.txt"',
        "specs/clauses.toml:2: source 'S': '../specs/sources/seed.txt' is not a relative path "
        "inside the catalogue's directory (names of letters, digits, '.', '_' and '-' joined "
        "by '/')",
        id="source-outside-the-catalogue",
    ),
    pytest.param(
        'S = "sources/seed.txt"',
        'S = "sources"',
        "specs/clauses.toml:2: source 'S': sources: a directory; expected a file",
        id="source-is-a-directory",
    ),
    pytest.param(
        'quote = "A cancel aborts the running job."',
        'quote = " \\n "',
        "specs/clauses.toml:16: clause 'C.cancel': "
        "the quote is empty (a clause quotes the words it stands for)",
        id="blank-quote",
    ),
    pytest.param(
        'summary = "Finishing settles."',
        'summary = "Finishing settles."\nnot_implemented = 3',
        "specs/clauses.toml:23: clause 'C.settle': not_implemented must be a string, found int",
        id="not-implemented-not-a-string",
    ),
    pytest.param(
        'summary = "Finishing settles."',
        'summary = "Finishing settles."\nnot_implemented = " "',
        "specs/clauses.toml:23: clause 'C.settle': "
        "not_implemented is empty (it says why no row implements the clause)",
        id="not-implemented-blank",
    ),
    pytest.param(
        'summary = "Finishing settles."',
        'summary = "Finishing settles."\nnot_implemented = "no\\u0007bell"',
        "specs/clauses.toml:23: clause 'C.settle': not_implemented holds the non-printing "
        "character '\\x07' at position 2 (a table is plain text; newlines and tabs are allowed)",
        id="not-implemented-control-character",
    ),
    pytest.param(
        'summary = "Finishing settles."',
        'summary = "Finishing settles."\nnot_implemented = "the table has no finish"',
        # Every place that cites it is named, each with its line.
        "specs/t.toml: 4 faults; nothing of it was loaded:\n"
        + "\n".join(
            f"  specs/t.toml:{line}: {where}: clause 'C.settle' says no row implements it (its "
            "not_implemented in specs/clauses.toml): drop the tag, or the not_implemented"
            for line, where in [
                (96, "row 'finish.done'"),
                (104, "row 'finish.stopped'"),
                (116, "rejected[0]"),
                (122, "invariant 'idle_holds_nothing'"),
            ]
        ),
        id="not-implemented-yet-cited",
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), CATALOGUE_FAULTS)
def test_a_faulty_clause_catalogue_is_rejected(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    specs = write_specs(tmp_path, clauses=edit(CLAUSES, old, new))
    with pytest.raises(SpecError, match=exactly(message)):
        load_spec(specs)


def test_a_clause_no_row_implements_loads_with_its_reason(tmp_path: Path) -> None:
    spare = (
        '\n[clauses."C.spare"]\nsource = "S"\nquote = "Any other submit only queues."\n'
        'summary = "Anything else queues."\nnot_implemented = "the table never queues twice"\n'
    )
    spec = load_spec(write_specs(tmp_path, clauses=CLAUSES + spare))
    assert spec.clauses["C.spare"].not_implemented == "the table never queues twice"
    assert spec.clauses["C.settle"].not_implemented is None


@pytest.mark.parametrize(
    ("section", "block"),
    [
        pytest.param(
            "types",
            '[types]\nholder = ["none", "live", "aborted"]\ncause = ["user", "parent"]\n',
            id="types",
        ),
        pytest.param(
            "defs",
            '[defs]\nquiescent = { expr = "phase == idle and holder == none", '
            'doc = "Nothing runs." }\n',
            id="defs",
        ),
    ],
)
def test_a_section_that_is_not_a_table_is_rejected(
    tmp_path: Path, section: str, block: str
) -> None:
    text = f"{section} = 3\n" + edit(BASE, block, "")
    with pytest.raises(
        SpecError, match=exactly(f"specs/t.toml:1: [{section}]: expected a table, found int")
    ):
        load_spec(write_specs(tmp_path, {"t.toml": text}))


def test_an_effect_argument_outside_its_range_is_found_by_enumeration(tmp_path: Path) -> None:
    table = edit(
        BASE, "[effects.start_job]\n", '[effects.start_job]\nparams = { slot = "int[0..2]" }\n'
    )
    table = edit(table, '"start_job()"', '"start_job(count + 1)"')
    with pytest.raises(
        SpecError,
        match=r"^specs/t\.toml:47: row 'submit\.idle': out-of-domain argument: start_job\(slot=3\) "
        r"in idle\{holder=none, queued=false, count=2\}$",
    ):
        load_spec(write_specs(tmp_path, {"t.toml": table}))


def test_constants_size_ranges_and_a_model_may_override_them(tmp_path: Path) -> None:
    from fsm_core.table._load import load_clauses, load_table

    table = edit(BASE, "[states]\n", "[constants]\nN = 2\n\n[states]\n")
    table = edit(table, 'type = "int[0..2]"', 'type = "int[0..N]"')
    specs = write_specs(tmp_path, {"t.toml": table})
    clauses = load_clauses(specs / "clauses.toml")
    assert load_table(specs / "t.toml", clauses).table.variables[2].type.name == "int[0..2]"
    wider = load_table(specs / "t.toml", clauses, constants={"N": 5})
    assert wider.table.variables[2].type.name == "int[0..5]"
    with pytest.raises(
        SpecError, match=r"^specs/t\.toml:9: \[constants\]: unknown constant 'M' \(constants: N\)$"
    ):
        load_table(specs / "t.toml", clauses, constants={"M": 1})


def test_every_fault_of_a_table_is_reported_with_its_line_and_a_guess(tmp_path: Path) -> None:
    """Two typos in two rows and one in a pair rule: one error names all three, each at its
    line with the name meant; the table is refused whole."""
    text = edit(BASE, 'guard = "holder == live"', 'guard = "holdr == live"')
    text = edit(text, '"notify_cancel(cause)"', '"notify_cancl(cause)"')
    text = edit(text, 'on = ["cancel"]', 'on = ["cancle"]')
    lines = text.splitlines()
    guard = lines.index('guard = "holdr == live"') + 1
    do = next(i for i, line in enumerate(lines, 1) if "notify_cancl(cause)" in line)
    on = lines.index('on = ["cancle"]') + 1
    with pytest.raises(SpecError) as caught:
        load_spec(write_specs(tmp_path, {"t.toml": text}))
    assert str(caught.value) == (
        "specs/t.toml: 3 faults; nothing of it was loaded:\n"
        f"  specs/t.toml:{guard}: row 'cancel.busy': unknown name 'holdr' (did you mean "
        "'holder'?) in 'holdr == live'\n"
        f"  specs/t.toml:{do}: row 'cancel.busy': unknown effect 'notify_cancl' (did you mean "
        "'notify_cancel'? effects: start_job, notify_cancel, settle) in 'notify_cancl(cause)'\n"
        f"  specs/t.toml:{on}: ignored[0]: unknown event 'cancle' (did you mean 'cancel'? "
        "events: submit, cancel, finish)"
    )
    assert [(e.where, e.line) for e in caught.value.faults] == [
        ("row 'cancel.busy'", guard),
        ("row 'cancel.busy'", do),
        ("ignored[0]", on),
    ]
    assert (caught.value.file, caught.value.line) == ("specs/t.toml", guard)


def line_of(text: str, needle: str, after: str = "") -> int:
    """The line (from 1) of ``text`` where ``needle`` first occurs past ``after``."""
    start = text.index(after) if after else 0
    return text.count("\n", 0, text.index(needle, start)) + 1


def test_a_repeated_row_id_is_placed_at_each_repeat_naming_the_first(tmp_path: Path) -> None:
    """(A fault naming a row by an id written twice was placed at the id's last row: each
    repeat, and each fault of the first row, showed the line of the third.)"""
    text = edit(BASE, 'id = "submit.quiet"', 'id = "submit.idle"')
    text = edit(text, 'id = "submit.busy"', 'id = "submit.idle"')
    text = edit(text, 'to = "busy"', 'to = "bsy"')
    lines = text.split("\n")
    first, second, third = (i for i, x in enumerate(lines, 1) if x == 'id = "submit.idle"')
    to = line_of(text, 'to = "bsy"')
    with pytest.raises(SpecError) as caught:
        load_spec(write_specs(tmp_path, {"t.toml": text}))
    assert [str(e) for e in caught.value.faults] == [
        f"specs/t.toml:{to}: row 'submit.idle': unknown state "
        "'bsy' in to (did you mean 'busy'? states: idle, busy, stopping)",
        f"specs/t.toml:{second}: row 'submit.idle': duplicate row id: rows[1] repeats rows[0] "
        f"(line {first})",
        f"specs/t.toml:{third}: row 'submit.idle': duplicate row id: rows[2] repeats rows[0] "
        f"(line {first})",
    ]


def test_faults_in_a_rows_on_and_doc_are_reported_with_its_others(tmp_path: Path) -> None:
    """(A row whose ``on`` was no string showed that fault alone: its others went unread.)"""
    text = edit(BASE, 'on = "cancel"', "on = 3")
    text = edit(text, 'to = "stopping"', 'to = "stoping"')
    text = edit(
        text, 'do = ["holder := none", "settle()"]', 'do = ["holder := none", "settle()"]\ndoc = 4'
    )
    text = edit(text, 'from = ["stopping"]\nto = "idle"', 'from = ["stopping"]\nto = "idel"')
    with pytest.raises(SpecError) as caught:
        load_spec(write_specs(tmp_path, {"t.toml": text}))
    stopped = 'id = "finish.stopped"'
    to_cancel, to_finish = line_of(text, 'to = "stoping"'), line_of(text, 'to = "idel"', stopped)
    assert [str(e) for e in caught.value.faults] == [
        f"specs/t.toml:{line_of(text, 'on = 3')}: row 'cancel.busy': on must be a string, "
        "found int",
        f"specs/t.toml:{to_cancel}: row 'cancel.busy': unknown state "
        "'stoping' in to (did you mean 'stopping'? states: idle, busy, stopping)",
        f"specs/t.toml:{to_finish}: row 'finish.stopped': "
        "unknown state 'idel' in to (did you mean 'idle'? states: idle, busy, stopping)",
        f"specs/t.toml:{line_of(text, 'doc = 4', stopped)}: row 'finish.stopped': doc must be "
        "a string, found int",
    ]


def test_every_fault_of_an_invariant_is_reported_at_its_line(tmp_path: Path) -> None:
    """(An invariant stopped at its first fault: its doc and clauses went unread, as did the
    ``while`` of a step invariant whose ``unchanged`` was wrong.)"""
    text = edit(BASE, 'holds = "phase == busy implies holder == live"', 'holds = "holdr == live"')
    text = edit(
        text,
        'doc = "A running job\'s holder is live."\nclauses = ["C.start"]',
        'doc = 7\nclauses = ["C.nope"]',
    )
    text += (
        '\n[[invariants]]\nid = "holder_kept"\nunchanged = "holdr"\nwhile = "phse == busy"\n'
        'doc = "The holder stays while busy."\nclauses = ["C.start"]\n'
    )
    with pytest.raises(SpecError) as caught:
        load_spec(write_specs(tmp_path, {"t.toml": text}))
    kept, holds = 'id = "holder_kept"', 'holds = "holdr'
    assert [str(e) for e in caught.value.faults] == [
        f"specs/t.toml:{line_of(text, holds)}: invariant 'busy_is_live': unknown "
        "name 'holdr' (did you mean 'holder'?) in 'holdr == live'",
        f"specs/t.toml:{line_of(text, 'doc = 7')}: invariant 'busy_is_live': doc must be a "
        "string, found int",
        f"specs/t.toml:{line_of(text, 'C.nope')}: invariant 'busy_is_live': unknown clause "
        "'C.nope' (see specs/clauses.toml)",
        f"specs/t.toml:{line_of(text, 'unchanged', kept)}: invariant 'holder_kept': unknown "
        "variable 'holdr' in unchanged (did you mean 'holder'? variables: holder, queued, count)",
        f"specs/t.toml:{line_of(text, 'while', kept)}: invariant 'holder_kept': unknown name "
        "'phse' (did you mean 'phase'?) in 'phse == busy'",
    ]


def test_every_fault_of_a_clause_catalogue_is_reported_at_its_line(tmp_path: Path) -> None:
    """(The catalogue stopped at its first fault.)"""
    text = edit(CLAUSES, 'quote = "A waking submit starts a job."', 'quote = "A submit starts."')
    text = edit(text, '[clauses."C.queue"]\nsource = "S"', '[clauses."C.queue"]\nsource = "T"')
    text = edit(text, 'summary = "Cancel aborts."', "summary = 5")
    text = edit(text, '[clauses."C.settle"]', '[clauses."C settle"]')
    with pytest.raises(SpecError) as caught:
        load_spec(write_specs(tmp_path, clauses=text))
    source = line_of(text, 'source = "T"')
    assert str(caught.value) == (
        "specs/clauses.toml: 4 faults; nothing of it was loaded:\n"
        f"  specs/clauses.toml:{line_of(text, 'A submit starts.')}: clause 'C.start': quote "
        "not found verbatim in sources/seed.txt\n"
        f"  specs/clauses.toml:{source}: clause 'C.queue': unknown "
        "source 'T' (sources: S)\n"
        f"  specs/clauses.toml:{line_of(text, 'summary = 5')}: clause 'C.cancel': summary must "
        "be a string, found int\n"
        f"  specs/clauses.toml:{line_of(text, 'C settle')}: [clauses]: clause id 'C settle' is "
        "not a valid id (letters, digits and _ in words joined by . or -, e.g. S000.first-wins)"
    )


def test_a_clause_of_a_source_that_cannot_be_read_is_not_also_reported(tmp_path: Path) -> None:
    text = edit(CLAUSES, 'S = "sources/seed.txt"', 'S = "sources/sed.txt"\nT = "../x"')
    with pytest.raises(SpecError) as caught:
        load_spec(write_specs(tmp_path, clauses=text))
    assert [str(e) for e in caught.value.faults] == [
        "specs/clauses.toml:2: source 'S': sources/sed.txt: file not found",
        "specs/clauses.toml:3: source 'T': '../x' is not a relative path inside the "
        "catalogue's directory (names of letters, digits, '.', '_' and '-' joined by '/')",
    ]


def test_a_fault_in_a_definition_is_not_echoed_by_the_ones_that_name_it(tmp_path: Path) -> None:
    text = edit(
        BASE,
        "[defs]\n",
        '[defs]\nbad = { expr = "holdr == live" }\nworse = { expr = "bad and queud" }\n',
    )
    with pytest.raises(SpecError) as caught:
        load_spec(write_specs(tmp_path, {"t.toml": text}))
    assert [e.fault for e in caught.value.faults] == [
        "unknown name 'holdr' (did you mean 'holder'?) in 'holdr == live'",
        "unknown name 'queud' (did you mean 'queued'?) in 'bad and queud'",
    ]


def test_the_error_carries_file_place_and_fault_apart(tmp_path: Path) -> None:
    specs = write_specs(tmp_path, {"t.toml": edit(BASE, 'to = "busy"', 'to = "bsy"')})
    with pytest.raises(SpecError) as caught:
        load_spec(specs)
    assert (caught.value.file, caught.value.where) == ("specs/t.toml", "row 'submit.idle'")
    assert caught.value.fault.startswith("unknown state 'bsy' in to")


def test_a_directory_with_one_bad_table_is_rejected_whole(tmp_path: Path) -> None:
    good = BASE
    bad = edit(edit(BASE, 'name = "t"', 'name = "u"'), 'to = "busy"', 'to = "bsy"')
    broken = write_specs(tmp_path / "broken", {"t.toml": good, "u.toml": bad})
    # Nothing is returned, not even the good table t.toml; and a failed load leaves nothing
    # behind, not even in load_spec's cache: the second load fails the same way.
    for _ in range(2):
        with pytest.raises(
            SpecError,
            match=r"^specs/u\.toml:51: row 'submit\.idle': "
            r"unknown state 'bsy' in to \(did you mean 'busy'\? states: idle, busy, stopping\)$",
        ):
            load_spec(broken)

    # The same tables, fixed, in a fresh directory (load_spec caches per root): both load.
    fixed = edit(BASE, 'name = "t"', 'name = "u"')
    spec = load_spec(write_specs(tmp_path / "fixed", {"t.toml": good, "u.toml": fixed}))
    assert sorted(spec.machines) == ["t", "u"]


def test_two_tables_may_not_name_the_same_machine(tmp_path: Path) -> None:
    with pytest.raises(
        SpecError, match=r"^specs/u\.toml: \[machine\]: machine name 't' is used twice$"
    ):
        load_spec(write_specs(tmp_path, {"t.toml": BASE, "u.toml": BASE}))


def test_a_fault_quotes_at_most_80_characters_of_input(tmp_path: Path) -> None:
    huge = "x" * 100_000
    table = edit(BASE, 'type = "holder"', f'type = "{huge}"')
    # reprlib's cut: the head and the tail of the quoted text, 80 characters in all.
    quoted = "'" + "x" * 37 + "..." + "x" * 38 + "'"
    with pytest.raises(
        SpecError,
        match=exactly(
            f"specs/t.toml:19: var 'holder': unknown type {quoted} "
            "(types: bool, holder, cause, phase, int[lo..hi])"
        ),
    ):
        load_spec(write_specs(tmp_path, {"t.toml": table}))


def _deep_inline_tables(path: Path) -> None:
    path.write_text("a = " + "{ b = " * 5_000 + "1" + " }" * 5_000 + "\n", encoding="utf-8")


def _deep_arrays(path: Path) -> None:
    # Deep enough to refuse, shallow enough for tomllib to parse.
    path.write_text("a = " + "[" * 40 + "]" * 40 + "\n", encoding="utf-8")


def _long_integer(path: Path) -> None:
    path.write_text("[constants]\nK = " + "9" * 5_000 + "\n", encoding="utf-8")


def _too_large(path: Path) -> None:
    path.write_text(BASE + "#" * (1 << 20) + "\n", encoding="utf-8")


FILE_FAULTS = [
    pytest.param(
        lambda p: p.write_bytes(b"# a table\n# \xff\n" + BASE.encode()),
        "specs/t.toml: not valid UTF-8 at line 2",
        id="invalid-utf8",
    ),
    pytest.param(
        _deep_inline_tables, "specs/t.toml: values nested over 32 deep", id="deep-inline-tables"
    ),
    pytest.param(_deep_arrays, "specs/t.toml: values nested over 32 deep", id="deep-arrays"),
    pytest.param(
        _long_integer,
        "specs/t.toml: not valid TOML: an integer too long to read",
        id="integer-over-4300-digits",
    ),
    pytest.param(
        _too_large,
        "specs/t.toml: larger than the limit of 1,048,576 bytes",
        id="over-1-mib",
    ),
    pytest.param(
        lambda p: p.mkdir(), "specs/t.toml: a directory; expected a file", id="a-directory"
    ),
    pytest.param(os.mkfifo, "specs/t.toml: not a regular file; expected a file", id="a-fifo"),
    pytest.param(
        lambda p: p.symlink_to(p),
        "specs/t.toml: cannot open the file: Too many levels of symbolic links",
        id="a-symlink-loop",
    ),
]


# A regression that opens a FIFO for reading blocks until a writer comes: fail, do not hang.
@pytest.mark.timeout(20)
@pytest.mark.parametrize(("make", "message"), FILE_FAULTS)
def test_a_table_file_that_cannot_be_read_is_refused_naming_it(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    specs = write_specs(tmp_path, {})
    make(specs / "t.toml")
    with pytest.raises(SpecError, match=exactly(message)):
        load_spec(specs)


def test_a_specs_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(BASE, encoding="utf-8")
    with pytest.raises(
        SpecError, match=exactly(f"{path}: not a directory; expected a directory of tables")
    ):
        load_spec(path)


def test_a_specs_root_too_long_for_the_file_system_is_refused(tmp_path: Path) -> None:
    root = tmp_path / ("x" * 300)
    with pytest.raises(
        SpecError, match=exactly(f"{root}: not a directory; expected a directory of tables")
    ):
        load_spec(root)


def test_a_specs_root_in_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    loop = tmp_path / "specs"
    loop.symlink_to(loop)
    with pytest.raises(
        SpecError, match=exactly(f"{loop}: cannot resolve the path: a symlink loop")
    ):
        load_spec(loop)


def test_a_runtime_needs_a_specs_directory_with_an_agent_table(tmp_path: Path) -> None:
    from fsm_core import Runtime
    from fsm_core.testing import ScriptedModel

    specs = write_specs(tmp_path)
    with pytest.raises(
        SpecError,
        match=exactly(
            f"{specs}: no table defines the machine 'agent' that the runtime runs (machines: t)"
        ),
    ):
        Runtime(ScriptedModel([]), specs=specs)


# --- limits (specs/README.md, "Limits") ----------------------------------------------------------

_OVER_VALUES = "over the limit of 1,000 (a model may raise it: [model] limits = { values = N })"

LIMIT_FAULTS = [
    pytest.param(
        'count = { type = "int[0..2]"',
        'count = { type = "int[0..100000]"',
        f"specs/t.toml:21: var 'count': int[0..100000] has 100,001 values, {_OVER_VALUES}",
        id="integer-range-over-the-values-limit",
    ),
    pytest.param(
        'cause = ["user", "parent"]',
        "cause = [" + ", ".join(f'"v{i}"' for i in range(2_000)) + "]",
        f"specs/t.toml:16: type 'cause': 2,000 values, {_OVER_VALUES}",
        id="enumeration-over-the-values-limit",
    ),
    pytest.param(
        "[events.finish]\n",
        '[events.finish]\nparams = { a = "int[0..99]", b = "int[0..99]" }\n',
        f"specs/t.toml:34: event 'finish': 10,000 argument tuples, {_OVER_VALUES}",
        id="event-arguments-over-the-values-limit",
    ),
    pytest.param(
        "[states]\n",
        "[constants]\nN = 10000000000\n\n[states]\n",
        "specs/t.toml:10: constant 'N': 10000000000 is over the limit of 2,147,483,647",
        id="constant-over-int32",
    ),
    pytest.param(
        'count = { type = "int[0..2]"',
        'count = { type = "int[0..' + "9" * 5_000 + ']"',
        "specs/t.toml:21: var 'count': the range bound "
        "'9999999999999999999999999999999999999...99999999999999999999999999999999999999' "
        "is over the limit of 2,147,483,647",
        id="range-bound-of-5000-digits",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holder == live and count < 99999999999999999999"',
        "specs/t.toml:81: row 'cancel.busy': the integer '99999999999999999999' is over the limit "
        "of 2,147,483,647 in 'holder == live and count < 99999999999999999999'",
        id="integer-literal-over-int32",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holder == live and count < ' + "1 + " * 200 + '1"',
        "specs/t.toml:81: row 'cancel.busy': the expression nests deeper than 50 levels in "
        "'holder == live and count < 1 + 1 + 1 ... 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1'",
        id="a-chain-of-200-terms",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "' + "(" * 110 + "holder == live" + ")" * 110 + '"',
        "specs/t.toml:81: row 'cancel.busy': the expression nests deeper than 50 levels in "
        "'(((((((((((((((((((((((((((((((((((((...))))))))))))))))))))))))))))))))))))))'",
        id="110-parentheses",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "' + "not " * 60 + 'holder == live"',
        "specs/t.toml:81: row 'cancel.busy': the expression nests deeper than 50 levels in "
        "'not not not not not not not not not n...not not not not not not holder == live'",
        id="60-nots",
    ),
    pytest.param(
        'guard = "holder == live"',
        'guard = "holder == live' + " " * 1_000 + '"',
        "specs/t.toml:81: row 'cancel.busy': the text is 1,014 characters long; the limit is 1,000 "
        "in 'holder == live                       ...                                      '",
        id="expression-over-1000-characters",
    ),
    pytest.param(
        "[defs]\n",
        '[defs]\nd0 = { expr = "phase == idle" }\n'
        + "".join(f'd{i} = {{ expr = "d{i - 1} and d{i - 1}" }}\n' for i in range(1, 10)),
        "specs/t.toml:32: def 'd8': the expression has 1,023 terms with its definitions "
        "expanded; the limit is 1,000 in 'd7 and d7'",
        id="definitions-doubling-past-1000-terms",
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), LIMIT_FAULTS)
def test_a_table_over_a_limit_is_refused_naming_the_size(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    specs = write_specs(tmp_path, {"t.toml": edit(BASE, old, new)})
    with pytest.raises(SpecError, match=exactly(message)):
        load_spec(specs)


def test_one_unused_variable_that_multiplies_the_domain_is_refused_at_once(
    tmp_path: Path,
) -> None:
    # It took 72 s to prove the agent table with it, and int[0..100000] ran out of memory.
    specs = copy_specs(tmp_path)
    shared_edit(
        specs / "agent.toml", "[vars]\n", '[vars]\nspare = { type = "int[0..100]", init = 0 }\n'
    )
    with pytest.raises(
        SpecError,
        match=exactly(
            "specs/agent.toml:41: var 'spare': int[0..100] has 101 values, so the loader would "
            "check 91,840,512 cases, over the limit of 1,000,000 "
            "(a model may raise it: [model] limits = { domain = N })"
        ),
    ):
        load_spec(specs)


def test_a_constant_that_makes_a_range_too_wide_is_refused(tmp_path: Path) -> None:
    # constants = { N = 10**9 } ran out of memory building the range.
    table = edit(BASE, "[states]\n", "[constants]\nN = 1000000000\n\n[states]\n")
    table = edit(table, 'type = "int[0..2]"', 'type = "int[0..N]"')
    with pytest.raises(
        SpecError,
        match=exactly(
            "specs/t.toml:24: var 'count': int[0..1000000000] has 1,000,000,001 values, "
            + _OVER_VALUES
        ),
    ):
        load_spec(write_specs(tmp_path, {"t.toml": table}))


def test_the_limit_table_in_specs_readme_is_the_loaders() -> None:
    from fsm_core._paths import specs_dir
    from fsm_core.table import _limits

    readme = (specs_dir() / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Limits\n")[1].split("\n## ")[0]
    section = section.split("\nA durable session log")[0]  # the loader's table, not the log's
    rows = [
        line.split("|")[1:3]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| limit ")
    ]
    documented = {name.strip(): value.strip() for name, value in rows if "---" not in name}
    limits = _limits.DEFAULT_LIMITS
    assert documented == {
        "file size": f"{_limits.MAX_FILE_BYTES >> 20} MiB",
        "nesting": f"{_limits.MAX_NESTING}",
        "expression length": f"{_limits.MAX_EXPR_LENGTH:,} characters",
        "expression depth": f"{_limits.MAX_EXPR_DEPTH} levels",
        "expression size": f"{_limits.MAX_EXPR_NODES:,} terms",
        "integers": f"{_limits.MAX_INT:,}",
        "`values`": f"{limits.values:,}",
        "`domain`": f"{limits.domain:,}",
        "`tree`": f"{limits.tree} nodes",
    }


def test_an_event_whose_arguments_multiply_the_domain_is_named(tmp_path: Path) -> None:
    table = edit(BASE, "[events.finish]\n", '[events.finish]\nparams = { n = "int[0..999]" }\n')
    table = edit(table, "[vars]\n", '[vars]\nspare = { type = "int[0..99]", init = 0 }\n')
    with pytest.raises(
        SpecError,
        match=exactly(
            "specs/t.toml:35: event 'finish': 1,000 argument tuples, so the loader would check "
            "5,425,200 cases, over the limit of 1,000,000 "
            "(a model may raise it: [model] limits = { domain = N })"
        ),
    ):
        load_spec(write_specs(tmp_path, {"t.toml": table}))


class _Name(str):
    """A state's name as the loader reads it, counting how often it is compared with another
    (an equal hash or a scan of a list): a check of N names that compares each with all the
    others makes N^2/2 comparisons."""

    compared = 0
    limit = 0

    def __eq__(self, other: object) -> bool:
        _Name.compared += 1
        if _Name.compared > _Name.limit:
            raise AssertionError(f"over {_Name.limit:,} comparisons of state names: quadratic")
        return str.__eq__(self, other)

    __hash__ = str.__hash__


# Checking the keys of 80,000 states took over half a minute (quadratic, a scan of a list per
# key) before the count was compared with the limit. The work is counted, not timed: each
# state's name may be compared a few times, never with every other name.
def test_eighty_thousand_states_are_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    states = "".join(f"s{i} = {{}}\n" for i in range(80_000))
    table = edit(BASE, "[states]\n", f"[states]\n{states}")

    def loads(text: str) -> dict[str, Any]:
        data = tomllib.loads(text)
        if "states" in data:
            data["states"] = {_Name(k): v for k, v in data["states"].items()}
        return data

    loader = importlib.import_module("fsm_core.table._load")  # the package shadows the name
    monkeypatch.setattr(
        loader, "tomllib", SimpleNamespace(loads=loads, TOMLDecodeError=tomllib.TOMLDecodeError)
    )
    monkeypatch.setattr(_Name, "compared", 0)
    monkeypatch.setattr(_Name, "limit", 4 * 80_000)
    with pytest.raises(
        SpecError,
        match=exactly(
            "specs/t.toml:9: [states]: 80,003 states, over the limit of 1,000 "
            "(a model may raise it: [model] limits = { values = N })"
        ),
    ):
        load_spec(write_specs(tmp_path, {"t.toml": table}))


@pytest.mark.parametrize(
    ("table", "runner"), [("activation", "rt.subagents"), ("admission", "rt.subagents' door")]
)
def test_a_runtime_needs_the_tables_its_subagent_registry_runs(
    tmp_path: Path, table: str, runner: str
) -> None:
    from fsm_core import Runtime
    from fsm_core.testing import ScriptedModel

    specs = copy_specs(tmp_path)
    (specs / f"{table}.toml").unlink()
    (specs / "wiring.toml").unlink()  # else the wiring refuses first (see the next test)
    left = ", ".join(sorted({"activation", "admission", "agent"} - {table}))
    with pytest.raises(
        SpecError,
        match=exactly(
            f"{specs}: no table defines the machine {table!r} that {runner} runs (machines: {left})"
        ),
    ):
        Runtime(ScriptedModel([]), specs=specs)


@pytest.mark.parametrize("table", ["activation", "admission", "agent"])
def test_a_wiring_needs_every_machine_it_connects(tmp_path: Path, table: str) -> None:
    specs = copy_specs(tmp_path)
    (specs / f"{table}.toml").unlink()
    line = (specs / "wiring.toml").read_text(encoding="utf-8").splitlines().index("[wiring]") + 1
    with pytest.raises(
        SpecError,
        match=exactly(
            f"specs/wiring.toml:{line}: [wiring]: the wiring connects a machine {table!r}; "
            "no table names it"
        ),
    ):
        load_spec(specs)


def test_a_runtime_needs_the_wiring_of_its_tables(tmp_path: Path) -> None:
    from fsm_core import Runtime
    from fsm_core.testing import ScriptedModel

    specs = copy_specs(tmp_path)
    (specs / "wiring.toml").unlink()
    with pytest.raises(
        SpecError,
        match=exactly(f"{specs}: no wiring.toml connects the tables that rt.subagents runs"),
    ):
        Runtime(ScriptedModel(), specs=specs)


def test_the_session_limit_table_in_specs_readme_is_the_sessions() -> None:
    from fsm_core._paths import specs_dir
    from fsm_core.runtime import _session

    readme = (specs_dir() / "README.md").read_text(encoding="utf-8")
    section = readme.split("\nA durable session log")[1].split("\n## ")[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ")]
    documented = {n.strip(): v.strip() for n, v in rows if "---" not in n and n.strip() != "limit"}
    assert _session.SAFE_INTEGER == 2**53 - 1
    assert documented == {
        "session file": f"{_session.MAX_LOG_BYTES >> 20} MiB (`MAX_LOG_BYTES`)",
        "integers": "+-(2**53 - 1) (`SAFE_INTEGER`)",
        "nesting": f"{_session.MAX_DEPTH} (`MAX_DEPTH`)",
    }


def test_lines_end_at_newlines_alone() -> None:
    """U+2028 in a comment or a string ended a line too (``str.splitlines``), moving every
    line a fault named after it by one."""
    from fsm_core.table._lines import key_lines

    text = 'a = 1  # one\u2028two\nb = "\u0085"\r\n[c]\nd = 2\n'
    assert key_lines(text) == {("a",): 1, ("b",): 2, ("c",): 3, ("c", "d"): 4}


def test_lines_are_found_past_values_that_span_lines() -> None:
    """A doc string holding a header and a key, and a list over several lines, move no
    line a fault names."""
    from fsm_core.table._lines import key_lines

    text = (
        '[machine]\ndoc = """\n[[rows]]\nid = "not a row"\n"""\n'  # 1-5
        '[[rows]]\nid = "a"\ndo = [\n  "x := 1",  # ]\n  { when = "y", do = ["z()"] },\n]\n'  # 6-11
        "[[rows]]\n'id' = \"b\"\nguard = 'c'\n"  # 12-14
    )
    lines = key_lines(text)
    assert tomllib.loads(text)["rows"][1]["guard"] == "c"
    assert (lines[("machine", "doc")], lines[("rows", 0)], lines[("rows", 0, "do")]) == (2, 6, 8)
    assert (lines[("rows", 1)], lines[("rows", 1, "id")], lines[("rows", 1, "guard")]) == (
        12,
        13,
        14,
    )
    assert ("rows", 2) not in lines
