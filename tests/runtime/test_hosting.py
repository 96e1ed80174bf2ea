"""The hosting layer (``fsm_core/runtime/_hosting.py``) refuses a host whose handlers are not
exactly its table's effects, when the host is built, naming the table and each effect."""

from __future__ import annotations

import re

import pytest

from fsm_core import FsmError, load_spec
from fsm_core.runtime._hosting import Hosted, hosts, performs

DOOR = load_spec().machines["admission"]


class _Door(Hosted[object]):
    """Every handler of specs/admission.toml but ``notice_host``, with one extra and one
    whose parameter is misnamed."""

    @performs("admit_root")
    def _admit_root(self) -> None: ...
    @performs("admit_below")
    def _admit_below(self) -> None: ...
    @performs("drain_roots")
    def _drain_roots(self) -> None: ...
    @performs("run_child")
    def _run_child(self, waking: bool) -> None: ...
    @performs("drain_activation")
    def _drain_activation(self) -> None: ...
    @performs("close_below_host")
    def _close_below_host(self) -> None: ...
    @performs("dispose_roots")
    def _dispose_roots(self, drain: bool) -> None: ...
    @performs("remember_child")
    def _remember_child(self) -> None: ...
    @performs("forget_below")
    def _forget_below(self) -> None: ...
    @performs("open_window")
    def _open_window(self) -> None: ...


def test_a_host_with_a_missing_extra_or_misnamed_handler_is_refused_when_built() -> None:
    door = hosts("admission")(_Door)()
    with pytest.raises(
        FsmError,
        match="^"
        + re.escape(
            "the runtime and specs/admission.toml disagree on effects: "
            "run_child takes (wake), but its handler _Door._run_child takes (waking); "
            "notice_host() has no handler in _Door; "
            "_Door._open_window performs open_window, which the table does not declare"
        )
        + "$",
    ):
        door._host(DOOR)


def test_a_host_of_another_table_is_refused() -> None:
    class _Agent(Hosted[object]):
        pass

    agent = hosts("agent")(_Agent)()
    with pytest.raises(FsmError, match=r"^_Agent hosts the agent table, not .*admission$"):
        agent._host(DOOR)
