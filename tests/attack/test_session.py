"""Session files attacked: odd paths, huge files and integers, and writers killed mid-flush.

A session is read only from a regular file (a directory, a FIFO or a device is refused with
the path named, before a byte is read and without blocking), at most ``MAX_LOG_BYTES`` of it,
with every integer bounded, and always with a :class:`SessionError` naming the path and the
line: never a bare ``OSError``, ``ValueError`` or ``MemoryError``, never half a session. A
writer killed during a flush leaves its temp file beside the log; the next writer of that log
removes it, and never a live writer's, nor any file that is not a temp file of that log.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fsm_core.runtime import Session, SessionError, _session
from fsm_core.runtime._session import MAX_LOG_BYTES
from tests.helpers import exactly

ONLY_REGULAR = "not a regular file (a session is read only from a regular file)"
BEYOND = "an integer beyond +-(2**53 - 1)"
HUGE = 10**5000  # past Python's int-to-string limit (4,300 digits): str() raises ValueError


def _logged(path: Path | None = None, turns: int = 1) -> Session:
    """A session holding ``turns`` recorded turn starts, attached to ``path`` if given."""
    session = Session(path)
    for turn in range(1, turns + 1):
        session.append("turn/start", {"turn": turn})
    return session


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The sizes of every ``os.read`` this test makes, for bounds on bytes read."""
    sizes: list[int] = []
    real = os.read

    def counted(fd: int, n: int) -> bytes:
        chunk = real(fd, n)
        sizes.append(len(chunk))
        return chunk

    with monkeypatch.context() as patch:
        patch.setattr(os, "read", counted)
        yield sizes


# --- paths that are not regular files ------------------------------------------------------


@pytest.mark.parametrize("opening", [Session.load, Session], ids=["load", "resume"])
def test_a_directory_is_refused_naming_it(
    tmp_path: Path, opening: Callable[[Path], Session]
) -> None:
    with pytest.raises(SessionError, match=exactly(f"{tmp_path}: a directory, {ONLY_REGULAR}")):
        opening(tmp_path)


@pytest.mark.timeout(30)  # the watchdog: a FIFO opened for reading waits for a writer
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
@pytest.mark.parametrize("opening", [Session.load, Session], ids=["load", "resume"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(
    tmp_path: Path, opening: Callable[[Path], Session], reads: list[int]
) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SessionError, match=exactly(f"{fifo}: a FIFO, {ONLY_REGULAR}")):
        opening(fifo)
    assert reads == []


_ZERO_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a regression fails, not the machine
from fsm_core.runtime import Session, SessionError
try:
    Session.load(sys.argv[1])
except SessionError as error:
    print(f"refused: {error}")
except MemoryError:
    print("MemoryError")
"""


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_an_endless_device_is_refused_before_a_byte_is_read() -> None:
    """``/dev/zero`` never ends: read whole, it ran the process out of memory. Loaded in a
    child whose address space is capped at 1 GiB, so a regression costs that child only."""
    child = subprocess.run(
        [sys.executable, "-c", _ZERO_CHILD, "/dev/zero"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert child.stdout == f"refused: /dev/zero: a character device, {ONLY_REGULAR}\n"


def test_a_session_still_loads_through_a_symlink_to_a_regular_file(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    _logged().save(log)
    (tmp_path / "link.jsonl").symlink_to(log)
    assert Session.load(tmp_path / "link.jsonl").events == _logged().events


# --- sizes ------------------------------------------------------------------------------------


def test_a_log_larger_than_the_limit_is_refused_before_a_byte_is_read(
    tmp_path: Path, reads: list[int]
) -> None:
    huge = tmp_path / "log.jsonl"
    with huge.open("wb") as fh:
        fh.truncate(MAX_LOG_BYTES + 1)  # sparse: no disk is spent on it
    limit = f"larger than the limit of {MAX_LOG_BYTES:,} bytes for a session file"
    with pytest.raises(
        SessionError, match=exactly(f"{huge}: {MAX_LOG_BYTES + 1:,} bytes, {limit}")
    ):
        Session.load(huge)
    assert reads == []


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="no procfs")
def test_a_file_longer_than_its_size_says_is_read_no_further_than_the_limit(
    monkeypatch: pytest.MonkeyPatch, reads: list[int]
) -> None:
    """A procfs file is a regular file of size 0 that holds more: the bound is on the bytes
    read, not on what ``fstat`` said."""
    monkeypatch.setattr(_session, "MAX_LOG_BYTES", 64)
    with pytest.raises(
        SessionError,
        match=exactly("/proc/self/status: larger than the limit of 64 bytes for a session file"),
    ):
        Session.load("/proc/self/status")
    assert sum(reads) == 65


def test_a_flush_past_the_limit_is_refused_and_the_file_keeps_the_last_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a session writes it can read back: a log over the limit is not written."""
    path = tmp_path / "log.jsonl"
    session = _logged(path, turns=2)
    asyncio.run(session.flush())
    written = path.read_bytes()
    monkeypatch.setattr(_session, "MAX_LOG_BYTES", len(written) + 1)
    session.append("turn/start", {"turn": 3})
    size = len(session.to_jsonl())
    with pytest.raises(
        SessionError,
        match=exactly(
            f"{path}: the log is {size:,} bytes, larger than the limit of {len(written) + 1:,} "
            "bytes for a session file; it was not written (the file keeps the last log written)"
        ),
    ):
        asyncio.run(session.flush())
    assert path.read_bytes() == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]


# --- integers ---------------------------------------------------------------------------------


def test_a_seed_with_a_huge_seq_is_refused_naming_the_event_and_field() -> None:
    record = {"seq": HUGE, "type": "turn/start", "data": {"turn": 1}}
    with pytest.raises(
        SessionError,
        match=exactly(
            f"<seed>: event 0: seq is {BEYOND}, but should be 0 (seq counts 0, 1, 2, ... in order)"
        ),
    ):
        Session.seed([record])


def _line(seq: str, data: str = '{"turn":2}', type: str = "turn/start") -> str:
    return f'{{"seq":{seq},"type":"{type}","data":{data}}}\n'


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        pytest.param(
            _line("9" * 5000),
            f"seq is {BEYOND}, but should be 1 (seq counts 0, 1, 2, ... in order)",
            id="seq",
        ),
        pytest.param(
            _line("1", '{"turn":-' + "9" * 5000 + "}"),
            f"turn/start: field 'turn' is {BEYOND}, which not every JSON reader holds exactly",
            id="field",
        ),
        pytest.param(
            _line(
                "1",
                '{"turn":1,"step":1,"id":"c1","name":"n","args":{"n":[' + "1" * 5000 + "]}}",
                "tool/call",
            ),
            f"tool/call: field 'args.n[0]' is {BEYOND}, which not every JSON reader holds exactly",
            id="nested",
        ),
    ],
)
def test_a_log_with_a_huge_integer_is_refused_naming_the_line_and_field(
    tmp_path: Path, line: str, fault: str
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(_logged().to_jsonl() + line, encoding="ascii")
    with pytest.raises(SessionError, match=exactly(f"{path}: line 2: {fault}")):
        Session.load(path)


def test_a_seeded_outcome_with_a_huge_key_is_refused_naming_it() -> None:
    record = {
        "seq": 0,
        "type": "turn/end",
        "data": {"turn": 1, "outcome": {"kind": "aborted", HUGE: 1}},
    }
    with pytest.raises(
        SessionError,
        match=exactly(
            "<seed>: event 0: turn/end: field 'outcome' must be exactly {\"kind\": ...}, but "
            "also has <an integer of about 5001 digits> (a durable outcome never records who "
            "cancelled or why)"
        ),
    ):
        Session.seed([record])


# --- temp files of killed writers ---------------------------------------------------------------

_WRITER = """
import asyncio, os, sys
from fsm_core.runtime import Session

session = Session(sys.argv[1])
for turn in range(len(session.events) + 1, len(session.events) + 1 + int(sys.argv[2])):
    session.append("turn/start", {"turn": turn})
real_fsync = os.fsync

def mid_flush(fd: int) -> None:
    os.fsync = real_fsync
    print("mid-flush", flush=True)  # the temp file holds the whole log, not yet renamed
    sys.stdin.readline()  # until the parent answers, closes the pipe, or kills this process
    real_fsync(fd)

os.fsync = mid_flush
asyncio.run(session.flush())
print("flushed", flush=True)
"""


def _writer(path: Path, turns: int) -> subprocess.Popen[str]:
    """A real writer in another process, stopped mid-flush: its temp file is written whole
    and not yet renamed over the log."""
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(turns)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "mid-flush\n"
    return child


def _temps(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


@pytest.mark.skipif(sys.platform == "win32", reason="no flock: nothing is swept")
def test_the_temp_file_of_a_writer_killed_mid_flush_is_removed_by_the_next_writer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    _logged().save(path)
    with _writer(path, turns=50) as child:
        [left] = _temps(path)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    assert _temps(path) == [left]  # the kill left a real temp file: the whole log, unrenamed
    assert (tmp_path / left).read_text(encoding="ascii").count("\n") == 51
    assert Session.load(path).events == _logged().events  # the log itself is untouched

    resumed = Session(path)
    resumed.append("turn/start", {"turn": 2})
    asyncio.run(resumed.flush())

    assert _temps(path) == []
    assert Session.load(path).events == _logged(turns=2).events


@pytest.mark.skipif(sys.platform == "win32", reason="no flock: nothing is swept")
def test_a_live_writers_temp_file_in_another_process_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    _logged().save(path)
    with _writer(path, turns=3) as child:
        [live] = _temps(path)
        _logged(turns=2).save(path)  # another writer of the log, while the child is mid-flush
        asyncio.run(_logged(path, turns=0).flush())
        assert _temps(path) == [live]
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "flushed\n"
        assert child.wait(timeout=60) == 0
    assert _temps(path) == []
    assert Session.load(path).events == _logged(turns=4).events  # the child's flush landed


@pytest.mark.skipif(sys.platform == "win32", reason="no flock: nothing is swept")
def test_only_the_logs_own_abandoned_temp_files_are_removed(tmp_path: Path) -> None:
    """The sweep takes regular files named exactly as this log's writer names its temp files
    (``.NAME.`` and 8 of ``[a-z0-9_]`` and ``.tmp``) that no live writer holds: nothing else."""
    path = tmp_path / "log.jsonl"
    abandoned = [".log.jsonl.abcd_123.tmp", ".log.jsonl.zzzzzzzz.tmp"]
    kept = [
        ".log.jsonl.abc.tmp",
        ".log.jsonl.ABCDEFGH.tmp",
        ".log.jsonl.abcdefgh.tmp.bak",
        ".log.jsonl.abcdefghi.tmp",
        "log.jsonl.abcdefgh.tmp",
        ".log.jsonlxabcdefgh.tmp",
        ".other.jsonl.abcdefgh.tmp",
        ".log.jsonl.lock",
        "notes.txt",
    ]
    for name in abandoned + kept:
        (tmp_path / name).write_text("x", encoding="ascii")
    os.mkdir(tmp_path / ".log.jsonl.directo_.tmp")
    (tmp_path / ".log.jsonl.symlink_.tmp").symlink_to(tmp_path / "notes.txt")
    os.mkfifo(tmp_path / ".log.jsonl.fifo____.tmp")
    specials = [".log.jsonl.directo_.tmp", ".log.jsonl.fifo____.tmp", ".log.jsonl.symlink_.tmp"]

    _logged().save(path)

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["log.jsonl", *kept, *specials])
    assert (tmp_path / "notes.txt").read_text(encoding="ascii") == "x"
    assert stat.S_ISFIFO(os.lstat(tmp_path / ".log.jsonl.fifo____.tmp").st_mode)


# --- the watchdog's own check ------------------------------------------------------------------


def test_the_capped_child_loads_a_real_log(tmp_path: Path) -> None:
    """The cap in ``_ZERO_CHILD`` does not itself fail a load: a regular log loads there."""
    path = tmp_path / "log.jsonl"
    _logged(turns=3).save(path)
    script = _ZERO_CHILD + "print(len(Session.load(sys.argv[1]).events))\n"
    child = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert child.stdout == "3\n"


@pytest.mark.skipif(sys.platform == "win32", reason="no flock: nothing is swept")
def test_sweeps_racing_a_writer_never_take_its_temp_file(tmp_path: Path) -> None:
    """Every save of a fresh session sweeps first; one thread flushing while another saves
    and sweeps: no flush loses its temp file (a rename of a removed file would fail)."""
    path = tmp_path / "log.jsonl"
    writer = _logged(path)
    failures: list[BaseException] = []

    def sweeping() -> None:
        try:
            for _ in range(200):
                _logged().save(path)
        except BaseException as error:  # reported below, on the test's thread
            failures.append(error)

    sweeper = threading.Thread(target=sweeping)
    sweeper.start()
    try:
        for _ in range(200):
            writer._write(path, str(path))  # a flush, without an event loop per round
    finally:
        sweeper.join()
    assert failures == []
    assert _temps(path) == []


# --- a disposed writer's session object -------------------------------------------------------


def test_a_disposed_agents_session_flushed_late_leaves_the_resumed_log_alone(
    tmp_path: Path,
) -> None:
    """A user who keeps the Session of a disposed agent and flushes it after another agent
    resumed the log must not overwrite the newer log with the older one: the session no longer
    holds the file, so it no longer writes it."""
    from fsm_core.runtime import Reply, Runtime, UserMessage
    from fsm_core.testing import ScriptedModel

    path = tmp_path / "a.jsonl"

    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Reply("one"), Reply("two")]))
        first = Session(path)
        handle = await rt.create_agent("a1", first)
        handle.agent.followup(UserMessage("m1", "hi"))
        await handle.agent.when_idle()
        await handle.dispose()
        resumed = await rt.create_agent("a2", Session(path))  # reads the log, resumes it
        resumed.agent.followup(UserMessage("m2", "again"))
        await resumed.agent.when_idle()
        newer = path.read_bytes()
        assert len(Session.load(path).events) > len(first.events)

        await first.flush()  # the disposed agent's session, flushed late
        assert path.read_bytes() == newer
        await rt.aclose()

    asyncio.run(scenario())
