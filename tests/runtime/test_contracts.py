"""The runtime asserts each effect's table contract as it performs it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from fsm_core import FsmError, Runtime, UserMessage
from fsm_core.runtime import Reply
from fsm_core.testing import ScriptedModel
from tests.helpers import copy_specs, core_of, edit, exactly


def test_an_effect_performed_outside_its_contract_stops_the_driver_loudly() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("never")]))
        agent = (await rt.create_agent("a1")).agent
        core = core_of(agent)
        open_holder = core._open_holder

        def open_then_cancel() -> None:
            # A runtime bug: letting a listener in during an effect the table does not mark as
            # notifying. The cancel aborts the holder before publish_status(running) runs.
            open_holder()
            agent.cancel()

        core._open_holder = open_then_cancel  # type: ignore[method-assign]
        agent.followup(UserMessage("m1", "hi"))
        driver = core.driver  # scheduled by the wake; it runs from the next loop iteration
        assert driver is not None
        with pytest.raises(
            FsmError,
            match=re.escape(
                "agent a1: publish_status(running) runs where its contract "
                "'if status == running then holder == live else holder == none' does not hold"
            ),
        ):
            await driver

    asyncio.run(main())


def _create_agent_on(specs: Path) -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]), specs=specs)
        await rt.create_agent("a1")

    asyncio.run(main())


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'status = ["idle", "running"]',
            'status = ["idle", "running", "paused"]',
            "the runtime and specs/agent.toml disagree on Status: the runtime's Status is "
            "['idle', 'running'], the table's type status is ['idle', 'paused', 'running']",
        ),
        (
            'lane = ["next_turn", "next_step"]',
            'lane = ["next_turn", "steering"]',
            "the runtime and specs/agent.toml disagree on Lane: the runtime's Lane is "
            "['next_step', 'next_turn'], the table's type lane is ['next_turn', 'steering']",
        ),
    ],
    ids=["status", "lane"],
)
def test_a_table_type_the_runtime_types_differently_is_refused_when_the_core_is_built(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "agent.toml", old, new)
    with pytest.raises(FsmError, match=exactly(message)):
        _create_agent_on(specs)


def test_a_table_whose_states_are_not_the_runtimes_phases_is_refused(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    table = specs / "agent.toml"
    # Rename the state everywhere it names the state (not in the event names maintenance_start
    # and maintenance_finish, a row id like cancel.maintenance, or a clause id).
    # The wiring names the state too (an await reads the agent's phase).
    for path in (table, specs / "wiring.toml"):
        text = path.read_text(encoding="utf-8")
        path.write_text(
            re.sub(r"(?<![\w.-])maintenance(?![\w.-])", "upkeep", text), encoding="utf-8"
        )
    with pytest.raises(
        FsmError,
        match=exactly(
            "the runtime and specs/agent.toml disagree on Phase: the runtime's Phase is "
            "['cancelling', 'disposed', 'disposing', 'idle', 'maintenance', 'running'], "
            "the table's states are "
            "['cancelling', 'disposed', 'disposing', 'idle', 'running', 'upkeep']"
        ),
    ):
        _create_agent_on(specs)
