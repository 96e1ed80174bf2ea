"""One live writer per session file: a second attach of a log's file is refused.

Every flush replaces the file with the writer's whole log, so two agents recording into one
file would each erase the other's events. While an agent records into ``Session(path)``, the
file is held (an OS lock, see ``_Claim``): a second attach, through another ``Session``
object, another runtime or another process, by the same name or another, is refused with a
``UsageError`` naming the file and, in this process, the agent holding it. Disposal releases
the file; so does the holding process dying.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsm_core import Runtime, UsageError, UserMessage
from fsm_core.runtime import Reply, Session, SessionError
from fsm_core.testing import ScriptedModel
from tests.helpers import exactly
from tests.runtime.test_faults import bounded


def _refusal(path: Path, holder: str, agent: str, file: Path | None = None) -> str:
    """The refusal of ``agent``'s attach of ``path`` (the file ``file`` if another name)."""
    where = f"{path} (the file {file})" if file is not None else f"{path}"
    return (
        f"{where}: {holder} already records into this log; agent {agent!r} needs a log of its "
        "own (or to resume it once that writer is disposed)"
    )


def _held(path: Path, holder: str, agent: str, file: Path | None = None) -> str:
    return exactly(_refusal(path, holder, agent, file))


def _by_process(path: Path) -> str:
    return f"another process (holding {path.with_name(f'.{path.name}.lock')})"


async def _turn(rt: Runtime, agent_id: str, text: str) -> None:
    agent = rt.agents[agent_id]
    agent.followup(UserMessage(f"{agent_id}:{text}", text))
    await bounded(agent.when_idle())


def test_a_second_session_on_the_file_is_refused_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        rt = Runtime(model=ScriptedModel([Reply("one"), Reply("two")]))
        first = await rt.create_agent("a1", Session(path))
        second = Session(path)
        with pytest.raises(UsageError, match=_held(path, "agent 'a1'", "a2")):
            await rt.create_agent("a2", second)

        assert list(rt.agents) == ["a1"]  # no half-created agent
        await rt.create_agent("a2", Session())  # and its id is free
        await _turn(rt, "a1", "hi")
        assert Session.load(path).events == first.agent.session.events  # the log is a1's
        await bounded(first.dispose())

        # Nothing stayed held: a session read now takes the file once a1 is disposed.
        third = await rt.create_agent("a3", Session(path))
        await _turn(rt, "a3", "again")
        turns = [e.data["turn"] for e in Session.load(path).events if e.type == "turn/start"]
        assert turns == [1, 2]
        with pytest.raises(UsageError, match=_held(path, "agent 'a3'", "a4")):
            await rt.create_agent("a4", second)
        await bounded(third.dispose())
        await rt.create_agent("a4", Session(path))
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_session_refused_leaves_its_object_free_to_attach_later(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        rt = Runtime(model=ScriptedModel())
        first = await rt.create_agent("a1", Session(path))
        second = Session(path)
        with pytest.raises(UsageError):
            await rt.create_agent("a2", second)
        await bounded(first.dispose())  # a1 recorded nothing: second is not stale
        await rt.create_agent("a2", second)
        assert rt.agents["a2"].session is second
        await bounded(rt.aclose())

    asyncio.run(main())


def test_two_runtimes_cannot_record_into_one_file(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        one, two = Runtime(model=ScriptedModel()), Runtime(model=ScriptedModel())
        await one.create_agent("a1", Session(path))
        with pytest.raises(UsageError, match=_held(path, "agent 'a1'", "a1")):
            await two.create_agent("a1", Session(path))
        assert list(two.agents) == []
        await bounded(one.aclose())
        await two.create_agent("a1", Session(path))
        await bounded(two.aclose())

    asyncio.run(main())


def test_detach_then_reattach_continues_the_log(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        rt = Runtime(model=ScriptedModel([Reply("one"), Reply("two"), Reply("three")]))
        session = Session(path)
        for agent_id in ("a1", "a2"):
            handle = await rt.create_agent(agent_id, session)
            await _turn(rt, agent_id, "hi")
            await bounded(handle.dispose())
        resumed = await rt.create_agent("a3", Session(path))
        await _turn(rt, "a3", "hi")
        await bounded(rt.aclose())
        turns = [e.data["turn"] for e in Session.load(path).events if e.type == "turn/start"]
        assert turns == [1, 2, 3]
        assert Session.load(path).events == resumed.agent.session.events

    asyncio.run(main())


@pytest.mark.parametrize("alias", ["symlink", "relative", "hard link", "symlinked folder"])
def test_another_name_of_the_file_is_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alias: str
) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        Session().save(path)
        rt = Runtime(model=ScriptedModel([Reply("one")]))
        other: Path
        if alias == "symlink":
            other = tmp_path / "link.jsonl"
            other.symlink_to(path)
        elif alias == "relative":
            monkeypatch.chdir(tmp_path)
            other = Path("a.jsonl")
        elif alias == "hard link":
            other = tmp_path / "hard.jsonl"
            os.link(path, other)
        else:
            (tmp_path / "folder").symlink_to(tmp_path, target_is_directory=True)
            other = tmp_path / "folder" / "a.jsonl"
        await rt.create_agent("a1", Session(path))  # a hard link made after is not seen
        if alias == "hard link":
            holder = "agent 'a1', through another name of the file,"
            refused = _held(other, holder, "a2")
        else:
            refused = _held(other, "agent 'a1'", "a2", file=path)
        with pytest.raises(UsageError, match=refused):
            await rt.create_agent("a2", Session(other))
        await _turn(rt, "a1", "hi")  # a flush renames a new file over the log: still held
        with pytest.raises(UsageError, match="already records into this log"):
            await rt.create_agent("a2", Session(other))
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_new_file_given_the_inode_a_flush_freed_is_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log with one name is held by its sidecar lock alone: once a flush renamed a new file
    over it, the filesystem may give its old inode number to a new, unrelated file (ext4 gives
    it to the very next one), which attaches as any other file does. The filesystem is made to
    do so here, so the test does not depend on who else creates files meanwhile."""

    async def main() -> None:
        path = tmp_path / "a.jsonl"
        Session().save(path)
        rt = Runtime(model=ScriptedModel([Reply("one")]))
        await rt.create_agent("a1", Session(path))
        freed = os.stat(path).st_ino
        await _turn(rt, "a1", "hi")  # the flush renames a new file over the log
        assert os.stat(path).st_ino != freed
        other = tmp_path / "b.jsonl"
        Session().save(other)
        new = os.stat(other)
        fstat = os.fstat

        def reused(fd: int) -> os.stat_result:
            status = fstat(fd)
            if (status.st_dev, status.st_ino) != (new.st_dev, new.st_ino):
                return status
            fields = list(status)
            fields[1] = freed  # st_ino
            return os.stat_result(fields)

        monkeypatch.setattr(os, "fstat", reused)
        handle = await rt.create_agent("b", Session(other))
        monkeypatch.undo()
        await _turn(rt, "b", "hi")
        await bounded(rt.aclose())
        assert Session.load(other).events == handle.agent.session.events

    asyncio.run(main())


def test_a_symlinked_log_is_written_through_the_link(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        link = tmp_path / "link.jsonl"
        link.symlink_to(path)
        rt = Runtime(model=ScriptedModel([Reply("one")]))
        handle = await rt.create_agent("a1", Session(link))
        await _turn(rt, "a1", "hi")
        await bounded(rt.aclose())
        assert link.is_symlink()
        assert Session.load(path).events == handle.agent.session.events

    asyncio.run(main())


def test_a_session_read_before_another_writer_recorded_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        stale = Session(path)  # read now, attached only later
        rt = Runtime(model=ScriptedModel([Reply("one")]))
        first = await rt.create_agent("a1", Session(path))
        await _turn(rt, "a1", "hi")
        await bounded(first.dispose())
        with pytest.raises(
            UsageError,
            match=exactly(
                f"{path}: the file holds events this session does not (another writer "
                "recorded there since the session read it); open it again to resume it as it is "
                "now"
            ),
        ):
            await rt.create_agent("a2", stale)
        assert list(rt.agents) == []
        await rt.create_agent("a2", Session(path))  # read again: resumes
        await bounded(rt.aclose())

    asyncio.run(main())


def test_the_same_events_written_in_another_format_are_not_stale(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        path.write_text('{"type": "turn/start", "seq": 0, "data": {"turn": 1}}\n')
        session = Session(path)  # a port's spacing and key order, the same events
        rt = Runtime(model=ScriptedModel())
        await rt.create_agent("a1", session)
        await bounded(rt.aclose())
        assert path.read_text() == '{"data":{"turn":1},"seq":0,"type":"turn/start"}\n'

    asyncio.run(main())


def test_loading_and_saving_need_no_lock(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        rt = Runtime(model=ScriptedModel([Reply("one")]))
        handle = await rt.create_agent("a1", Session(path))
        await _turn(rt, "a1", "hi")
        events = handle.agent.session.events
        assert Session.load(path).events == Session(path).events == events  # replay reads
        Session.load(path).save(tmp_path / "copy.jsonl")
        assert Session.load(tmp_path / "copy.jsonl").events == events
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_log_that_cannot_be_locked_is_not_attached(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        (tmp_path / ".a.jsonl.lock").mkdir()  # where the lock file goes
        rt = Runtime(model=ScriptedModel())
        with pytest.raises(
            SessionError,
            match=exactly(
                f"{path}: cannot lock the log: Is a directory ({tmp_path}/.a.jsonl.lock)"
            ),
        ):
            await rt.create_agent("a1", Session(path))
        assert list(rt.agents) == []
        await bounded(rt.aclose())

    asyncio.run(main())


# --- another process ----------------------------------------------------------------------------

_CHILD = """
import asyncio, sys
from fsm_core import Runtime, UsageError
from fsm_core.runtime import Session
from fsm_core.testing import ScriptedModel

async def main(path: str, hold: bool) -> None:
    rt = Runtime(model=ScriptedModel())
    try:
        await rt.create_agent("child", Session(path))
    except UsageError as error:
        print(f"refused: {error}", flush=True)
        return
    print("attached", flush=True)
    if hold:
        sys.stdin.readline()  # until the parent closes the pipe or kills this process
    await rt.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2] == "hold"))
"""


@pytest.mark.parametrize("name", ["same", "hard link"])
def test_another_process_cannot_attach_the_file_while_it_is_held(tmp_path: Path, name: str) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        other = path
        if name == "hard link":
            Session().save(path)
            other = tmp_path / "hard.jsonl"
            os.link(path, other)
        rt = Runtime(model=ScriptedModel())
        await rt.create_agent("a1", Session(path))
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(other), "once"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        holder = (
            _by_process(path)
            if name == "same"
            else "another process, through another name of the file,"
        )
        assert child.stdout == f"refused: {_refusal(other, holder, 'child')}\n"
        await bounded(rt.aclose())
        again = subprocess.run(
            [sys.executable, "-c", _CHILD, str(other), "once"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert again.stdout == "attached\n"

    asyncio.run(main())


def test_a_process_that_dies_holding_the_file_releases_it(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        rt = Runtime(model=ScriptedModel())
        with subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path), "hold"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdout is not None
            assert child.stdout.readline() == "attached\n"
            with pytest.raises(UsageError, match=_held(path, _by_process(path), "a1")):
                await rt.create_agent("a1", Session(path))
            assert list(rt.agents) == []
            child.kill()  # no disposal, no detach: only the kernel releases the lock
            child.wait(timeout=60)
        await rt.create_agent("a1", Session(path))
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_child_admitted_on_a_held_file_is_refused_before_its_parent_admits(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        path = tmp_path / "a.jsonl"
        rt = Runtime(model=ScriptedModel([Reply("one"), Reply("two")]))
        await rt.create_agent("a1", Session(path))
        host = await rt.create_agent("host", Session())
        await rt.subagents.start(host.agent, "c1", "hi")
        for parent, child in ((host.agent, "c2"), (rt.agents["c1"], "c3")):
            with pytest.raises(
                UsageError, match=exactly("agent 'a1' already records into that session")
            ):
                await rt.subagents.start(parent, child, "hi", session=Session(path))
            assert child not in rt.agents and not rt.subagents.holds(child)
        await bounded(rt.aclose())  # c1's activation admitted nothing: its teardown converges
        assert list(rt.agents) == []

    asyncio.run(main())


def test_a_child_refused_at_attach_below_an_activation_leaves_its_parent_free_to_close(
    tmp_path: Path,
) -> None:
    """A refusal only the attach can find (a session read before another writer recorded)
    comes while the parent activation's admit row runs: the parent must not count a child
    that was never created, or its teardown waits on a child that never settles."""

    async def main() -> None:
        path = tmp_path / "a.jsonl"
        stale = Session(path)
        rt = Runtime(model=ScriptedModel([Reply("one"), Reply("two")]))
        writer = await rt.create_agent("writer", Session(path))
        await _turn(rt, "writer", "hi")
        await bounded(writer.dispose())
        host = await rt.create_agent("host", Session())
        act = await rt.subagents.start(host.agent, "c1", "hi")
        with pytest.raises(UsageError, match="another writer recorded there"):
            await rt.subagents.start(rt.agents["c1"], "c2", "hi", session=stale)
        assert "c2" not in rt.agents and not rt.subagents.holds("c2")
        assert act.table_state["children"] is False
        await bounded(rt.subagents.dispose(act))
        await bounded(rt.aclose())
        assert list(rt.agents) == []

    asyncio.run(main())
