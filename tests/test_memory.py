"""``python -m fsm_core.tools._memory`` sizes where a check's memory goes, part by part."""

from __future__ import annotations

import re

import pytest

from fsm_core.tools._memory import deep_size, main


def test_each_object_is_counted_once_by_the_first_part_that_reaches_it() -> None:
    shared = "x" * 1000
    seen: set[int] = set()
    first = deep_size([[shared, shared]], seen)
    assert first >= 1000
    assert deep_size([(shared,)], seen) < 100  # the tuple alone: the string was counted


def test_the_parts_of_an_agent_tree_are_sized(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent_races"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("agent_races: 2,830 states, 320,600 transitions, ")
    for part in ("explorer: visited states", "explorer: liveness graph", "engine: _calls_of"):
        assert re.search(rf"^  {part} +[\d,.]+ MiB +[\d,]+ B/state$", out, re.MULTILINE), part
    assert re.search(r"^Done\. agent_races=\d+$", out, re.MULTILINE)


def test_the_explorer_alone_is_sized_on_demand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--explorer-only", "window"]) == 0
    out = capsys.readouterr().out
    assert "explorer: visited states" in out and "engine:" not in out
