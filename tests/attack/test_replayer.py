"""``fsm-core vectors --replay`` against hostile replayers: real scripts that flood their pipes,
print bytes that are not UTF-8, nest a verdict deeper than a parser recurses, put terminal
escapes in their reasons, or leave processes behind (``setsid``, a double fork). What must
hold is a bound: bytes kept and printed, a failing vector named, processes left none."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest

from fsm_core.cli import main
from fsm_core.tools._replay import REASON_SHOWN, VERDICT_DEPTH, VERDICT_SLACK, verdict_bound
from fsm_core.tools._vectors import TABLES
from tests.table_driver import VECTORS

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="probes /proc and pidfds: Linux"),
]

FLOOD = 32 << 20
"""What a flooding replayer writes: 32 MiB, thousands of times what a small file's answer may
take, and finite, so the suite run against the unhardened command ends too."""

KEPT = 4 << 20
"""The most memory a replay of a small file may take at its peak, whatever the replayer does."""

ANSWER = """\
import json, sys
for line in sys.stdin:
    try:
        vid = json.loads(line)['id']
    except ValueError:
        vid = '?'
    print(json.dumps({'id': vid, 'verdict': 'pass'}), flush=True)
"""
"""A replayer's head that passes every vector it is given."""


@pytest.fixture(autouse=True)
def _temp_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def vectors(tmp_path: Path, count: int = 4) -> list[bytes]:
    """A vectors directory in ``tmp_path``: the tables and the first ``count`` lines of
    window.jsonl (its header and ``count - 1`` vectors); returns those lines."""
    shutil.copy(VECTORS / TABLES, tmp_path)
    lines = (VECTORS / "window.jsonl").read_bytes().splitlines()[:count]
    (tmp_path / "window.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return lines


def replay(tmp_path: Path, script: str, *flags: str) -> tuple[int, str, str, int]:
    """Replay the vectors in ``tmp_path`` with the Python ``script``: the exit status, standard
    output and error, and the peak of the memory the replay took (Python's allocations)."""
    port = tmp_path / "port.py"
    port.write_text(script, encoding="utf-8")
    argv = ["vectors", "--out", str(tmp_path), "--replay", f"{sys.executable} {port}", *flags]
    out, err = io.StringIO(), io.StringIO()
    tracemalloc.start()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return code, out.getvalue(), err.getvalue(), peak


def full(out: str) -> list[dict[str, object]]:
    """The failures in full, from the file whose path the replay printed."""
    path = out.rpartition("every failure in full, one JSON line each: ")[2].splitlines()[0]
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


# --- output that is too much ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flood", "said"),
    [
        (
            "sys.stdout.buffer.write(b'x' * (1 << 20))",
            "fail: window.jsonl:1: header: the verdict is longer than BOUND bytes (4 times the "
            f"vector and {VERDICT_SLACK:,}); the replayer was killed",
        ),
        (
            'sys.stdout.buffer.write(b\'{"id": "?", "verdict": "pass"}\\n\' * (1 << 15))',
            "fail: window.jsonl:1: header: the verdict names another vector: "
            '\'{"id": "?", "verdict": "pass"}\'',
        ),
    ],
    ids=["one-endless-line", "verdicts-past-the-last-vector"],
)
def test_a_replayer_flooding_stdout_is_killed_at_the_files_bound(
    tmp_path: Path, flood: str, said: str
) -> None:
    lines = vectors(tmp_path)
    script = f"import sys\nfor _ in range({FLOOD >> 20}):\n    {flood}\n"
    code, out, _, peak = replay(tmp_path, script)
    assert peak < KEPT
    assert len(out) < 4 * 1024
    assert code == 1
    assert out.splitlines()[0] == said.replace("BOUND", f"{verdict_bound(lines[0]):,}")
    if "past" in said:
        extra = "fail: window.jsonl:4: -: more verdicts than vectors; the replayer was killed"
        assert extra in out.splitlines()


def test_a_replayer_flooding_stderr_is_killed_at_the_files_bound(tmp_path: Path) -> None:
    lines = vectors(tmp_path)
    script = f"import sys\nfor _ in range({FLOOD >> 20}):\n    sys.stderr.write('e' * (1 << 20))\n"
    code, out, _, peak = replay(tmp_path, script)
    cap = sum(verdict_bound(line) for line in lines)
    assert peak < KEPT
    assert code == 1
    why = (
        f"the replayer wrote more than {cap:,} bytes to standard error (the most its answer on "
        "this file may take) and was killed: "
    )
    assert out.splitlines()[0] == (
        "fail: window.jsonl:1: header: " + why + "e" * (REASON_SHOWN - 3 - len(why)) + "..."
    )
    assert out.splitlines()[1] == (
        "fail: window.jsonl:2: "
        f"{json.loads(lines[1])['id']}: not replayed (the replayer was killed at line 1)"
    )


# --- output that is hostile -----------------------------------------------------------------------


def test_output_that_is_not_utf8_is_decoded_with_replacement(tmp_path: Path) -> None:
    vectors(tmp_path, 2)
    script = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe{\\n\\xc3\\n')\n"
    code, out, _, _ = replay(tmp_path, script)
    assert code == 1
    assert out.splitlines()[:2] == [
        "fail: window.jsonl:1: header: the verdict is not JSON: '\ufffd\ufffd{'",
        "fail: window.jsonl:2: "
        + json.loads((tmp_path / "window.jsonl").read_bytes().splitlines()[1])["id"]
        + ": the verdict is not JSON: '\ufffd'",
    ]


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_a_verdict_nested_deep_is_a_failing_verdict(tmp_path: Path, depth: int) -> None:
    """2,000 deep fits a verdict's bound and passes the parser's recursion limit; 100,000 deep
    is longer than any verdict may be."""
    lines = vectors(tmp_path, 2)
    script = (
        "import json, sys\n"
        "for line in sys.stdin:\n"
        f"    print('[' * {depth} + ']' * {depth}, flush=True)\n"
    )
    code, out, _, _ = replay(tmp_path, script)
    assert code == 1
    first = out.splitlines()[0]
    if 2 * depth <= verdict_bound(lines[0]):
        assert first.startswith(
            f"fail: window.jsonl:1: header: the verdict nests more than {VERDICT_DEPTH} deep: '[[[["
        )
    else:
        assert first.startswith("fail: window.jsonl:1: header: the verdict is longer than")


def test_reasons_are_printed_escaped_and_short_and_kept_whole_in_a_file(tmp_path: Path) -> None:
    """100 failing vectors, each reason a terminal escape (set the title, clear the screen,
    ring the bell) and 4,000 characters: what is printed has no control character and is
    bounded; the file whose path is printed has every reason whole."""
    lines = vectors(tmp_path, 101)
    reason = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u202e" + "A" * 4_000
    script = (
        "import json, sys\n"
        "for line in sys.stdin:\n"
        f"    print(json.dumps({{'id': json.loads(line)['id'], 'verdict': 'fail', "
        f"'reason': {reason!r}}}), flush=True)\n"
    )
    code, out, _, _ = replay(tmp_path, script)
    assert code == 1
    printed = out.splitlines()
    assert all(c.isprintable() for line in printed for c in line)
    assert printed[0] == (
        "fail: window.jsonl:1: header: \\x1b]0;owned\\x07\\x1b[2J\\x1b[31m\\u202e"
        + "A" * (REASON_SHOWN - 3 - 37)
        + "..."
    )
    assert len(printed) == 20 + 3
    assert len(out) < 23 * (REASON_SHOWN + 100)
    kept = full(out)
    assert [(f["line"], f["reason"]) for f in kept] == [(n, reason) for n in range(1, 102)]
    assert len(kept) == len(lines)


# --- a bad command --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("node 'x", '--replay "node \'x": No closing quotation; quote it as a shell would'),
        (
            "/no/such/replayer --all",
            "--replay '/no/such/replayer --all': '/no/such/replayer' is neither an executable "
            "file nor a command on PATH",
        ),
    ],
    ids=["unbalanced-quote", "no-such-program"],
)
def test_a_bad_replay_command_is_refused_before_anything_runs(
    tmp_path: Path, command: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors(tmp_path)
    assert main(["vectors", "--out", str(tmp_path), "--replay", command]) == 2
    assert capsys.readouterr() == ("", f"fsm-core: {said}\n")


# --- processes left behind ------------------------------------------------------------------------


SETSID = """
import subprocess
child = subprocess.Popen(['sleep', '1000'], start_new_session=True)  # it holds stdout
open(PID, 'w').write(str(child.pid))
"""
"""Leaves a process in a session of its own that holds the replayer's standard output."""

DAEMON = """
import os
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the daemon: no pipe of the replayer's, in no group of its
        for fd in (r, 0, 1, 2):
            os.close(fd)
        open(PID, 'w').write(str(os.getpid()))
        os.close(w)
        os.execvp('sleep', ['sleep', '1000'])
    os._exit(0)
os.close(w)
os.read(r, 1)  # end-of-file once the daemon wrote its pid and closed the pipe
"""
"""Leaves a daemon: a double fork into a session of its own, every pipe closed."""


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfds", "no-pidfds"])
@pytest.mark.parametrize("escape", [SETSID, DAEMON], ids=["setsid-holding-stdout", "daemon"])
def test_no_process_of_a_replayer_outlives_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, escape: str, pidfds: bool
) -> None:
    """The replayer passes every vector and exits, leaving a process outside its group: the
    replay does not wait for it (the --timeout, which the unhardened command waited out) and it
    is killed; on a kernel without pidfds too (exit seen by ``waitid``, strays killed by pid)."""
    lines = vectors(tmp_path)
    pid_file = tmp_path / "left.pid"
    left = 0
    try:
        script = f"PID = {str(pid_file)!r}\n{ANSWER}{escape}"
        with monkeypatch.context() as patch:
            if not pidfds:
                patch.setattr(os, "pidfd_open", _no_pidfds)
            code, out, _, _ = replay(tmp_path, script, "--timeout", "20")
        left = int(pid_file.read_text())
        assert _exits(left)
    finally:
        if left and not _exits(left, 0):
            os.kill(left, signal.SIGKILL)
    assert (code, out.splitlines()[-1].rpartition(": ")[2]) == (0, f"{len(lines)} pass")


def _no_pidfds(pid: int, flags: int = 0) -> int:
    raise OSError(errno.ENOSYS, "pidfd_open is not implemented")


def _exits(pid: int, within: float = 10) -> bool:
    """True iff process ``pid`` has exited (or exits ``within`` seconds), waited on a pidfd."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)
