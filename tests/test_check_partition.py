"""One model's search partitioned across processes finds what one process finds: the same
counts, verdict, violated property, shortest trace, rows taken and findings, on the default
models, on spec mutants, and at state limits; a worker that dies stops the check with a clear
error, and ``--cluster`` does the same search on a Dask cluster."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fsm_core.check
from fsm_core._paths import models_dir
from fsm_core.check import Model, Report, _partition, check, load_model
from fsm_core.check._parallel import Source, partitions
from fsm_core.check._partition import check_partitioned
from fsm_core.check._system import build
from fsm_core.tools._mutants import MUTANTS, _copy_tables
from tests.helpers import shipped_models, sweep, write_model
from tests.test_check_cli import run
from tests.test_check_workers import AT_ONCE, descendants, linux_only, under_way, untimed

DEFAULT_MODELS = [m for m in shipped_models() if m.tier == "default"]


def outcome(report: Report) -> tuple[Any, ...]:
    """Everything a check reports but its timings; moves by value (a composed model numbers
    them as met, so the numbers differ from one process to another)."""
    r, v = report.result, report.violation
    trace = None
    if v is not None:
        trace = (v.name, [(None if i is None else report.moves[i], s) for i, s in v.trace])
    return (
        report.verdict,
        r.states,
        r.transitions,
        r.depth,
        r.complete,
        trace,
        sorted({str(report.moves[i]) for i in r.labels_taken}),  # a table may repeat a move
        report.dead_rows,
        report.unreached,
        report.backend,
    )


def assert_partitioned_alike(model: Model, path: Path, **options: Any) -> Report:
    """``model`` checked in one process and in two shards (without the liveness pass, which
    is not partitioned): they must agree. The partitioned report."""
    one = check(model, liveness=False, **options)
    two = check_partitioned(model, Source(path.absolute()), 2, **options)
    assert outcome(two) == outcome(one)
    return two


def _path(model: Model) -> Path:
    return models_dir() / Path(model.file).name


@pytest.mark.parametrize(
    "model",
    sweep(
        DEFAULT_MODELS,
        lambda m: m.name,
        fast={m.name for m in DEFAULT_MODELS if m.kind == "table"} | {"activation_chain"},
    ),
)
def test_every_default_model_partitioned_finds_what_one_process_finds(model: Model) -> None:
    report = assert_partitioned_alike(model, _path(model))
    assert report.verdict == "ok"


def test_the_python_backend_partitions_a_table_model_alike() -> None:
    model = load_model(models_dir() / "bench_M.toml")
    assert assert_partitioned_alike(model, _path(model), backend="python").backend == "python"


@pytest.mark.parametrize("limit", [1, 2, 500, 20_000, 123_456])
@pytest.mark.parametrize("backend", ["vector", "python"])
def test_a_state_limit_stops_both_at_the_same_state(backend: str, limit: int) -> None:
    model = load_model(models_dir() / "bench_M.toml")
    report = assert_partitioned_alike(model, _path(model), max_states=limit, backend=backend)
    assert report.verdict == "incomplete"


class InProcess:
    """A :class:`~fsm_core.check._partition.Transport` running every shard here, each on an
    engine of its own (as each process has), counting the states the shards send each other."""

    def __init__(self, model: Model, owners: int) -> None:
        self.owners = owners
        self.held = [
            _partition.Held(_partition.PythonShard(build(model), i, owners), i)
            for i in range(owners)
        ]
        self.sent = 0
        self._keys: list[Any] = []
        self._payloads: list[list[Any]] = []

    def begin(self) -> None:
        self._keys = [h.step("begin") for h in self.held]

    def expand(self) -> list[Any]:
        answers = [
            h.expand([None if j == i else k for j, k in enumerate(self._keys)])
            for i, h in enumerate(self.held)
        ]
        self._payloads = [payloads for _, payloads in answers]
        self.sent += sum(len(p) for ps in self._payloads for p in ps if p is not None)
        return [expanded for expanded, _ in answers]

    def merge(self) -> list[int]:
        self._keys = [h.merge([p[j] for p in self._payloads]) for j, h in enumerate(self.held)]
        return [int(k.size) for k in self._keys]

    def keys(self) -> list[Any]:
        return self._keys

    def ask(self, shard: int, what: str, *args: Any) -> Any:
        return self.held[shard].step(what, *args)


def test_a_shard_sends_each_state_another_owns_once_however_often_it_reaches_it() -> None:
    model = load_model(models_dir() / "agent_races.toml")
    transport = InProcess(model, 2)
    result, _ = _partition.search(model.name, transport, _partition.WIDTH)
    one = check(model, liveness=False).result
    assert (result.states, result.transitions, result.depth) == (
        one.states,
        one.transitions,
        one.depth,
    )
    # Every state but the initial one is sent by at most one shard (the one whose level first
    # reaches it, when the other owns it), never again by a later level that reaches it.
    assert 0 < transport.sent < one.states


SAMPLE = [
    m
    for m in MUTANTS
    if m.name
    in {
        "last_wins_cause",
        "keep_inbox_parks_post_abort_wake",
        "parent_leaves_before_children",
        "root_notice_refused",
        "close_leaves_agent_awake",
    }
]
"""Spec mutants of each composed kind's tables (agent, activation, admission, wiring)."""


@pytest.fixture
def planted() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fsm-core-partition-test-") as tmp:
        root = Path(tmp)
        _copy_tables(root, None)
        yield root


@pytest.mark.parametrize(
    "mutant",
    sweep(SAMPLE, lambda m: m.name, fast={"root_notice_refused", "last_wins_cause"}),
)
def test_a_spec_mutant_partitioned_breaks_the_same_property_alike(
    mutant: Any, planted: Path
) -> None:
    mutant.plant(planted / "specs")
    path = planted / "models" / f"{mutant.models[0]}.toml"
    report = assert_partitioned_alike(load_model(path), path)
    assert report.verdict == "violation"


def test_a_large_bench_tree_alone_is_partitioned_and_nothing_else_is() -> None:
    by_name = {m.name: m for m in shipped_models()}
    assert partitions(by_name["agent_tree_wide"], workers=2, models=1)
    assert not partitions(by_name["agent_tree_wide"], workers=1, models=1)
    assert not partitions(by_name["agent_tree_wide"], workers=2, models=2)
    # over before it would gain
    assert not partitions(by_name["agent_tree_outside_dispose"], workers=2, models=1)
    assert not partitions(by_name["agent_deep"], workers=2, models=1)  # its liveness pass
    # a table's search costs less than sending its states between processes
    assert not partitions(by_name["bench_XL"], workers=2, models=1)
    assert not partitions(by_name["bench_L"], workers=2, models=1)
    # searched over sibling orbits: its traces are rebuilt on the unreduced engine in one place
    assert by_name["agent_tree_three"].symmetry
    assert not partitions(by_name["agent_tree_three"], workers=2, models=1)


def test_two_workers_print_what_one_prints_for_a_partitioned_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agent_races in the bench tier, with no [expect]: a model partitions as the largest."""
    body = (models_dir() / "agent_races.toml").read_text(encoding="utf-8")
    body = body.replace('kind = "agent"\n', 'kind = "agent"\ntier = "bench"\n', 1)
    path = write_model(tmp_path, "races", body[: body.index("[expect]")])
    partitioned: list[int] = []

    def counted(model: Model, source: Source, workers: int, **options: Any) -> Report:
        partitioned.append(workers)
        return check_partitioned(model, source, workers, **options)

    monkeypatch.setattr(_partition, "check_partitioned", counted)
    one, two = run("--workers", "1", str(path)), run("--workers", "2", str(path))
    assert partitioned == [2]
    assert two.code == one.code == 0
    assert untimed(two.out) == untimed(one.out)
    assert only_progress(one.err + two.err, "races")


def only_progress(err: str, name: str) -> bool:
    """True iff ``err`` holds nothing but progress lines of ``name`` (a busy machine's)."""
    line = rf"^{name}: states=\d+ frontier=\d+ depth=\d+ states/s=\d+$"
    return all(re.match(line, text) for text in err.splitlines())


@linux_only
def test_a_partition_worker_killed_is_an_error_naming_its_part() -> None:
    p, _, _ = under_way(
        ["check", "--workers", "2", "agent_tree_wide", *AT_ONCE], "agent_tree_wide: states="
    )
    workers = [pid for pid, generation in descendants(p.pid) if generation == 1]
    with p:
        assert len(workers) == 1, workers  # forked by the command itself
        os.kill(workers[0], signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    assert (p.returncode, out) == (2, "")
    assert err.splitlines()[-1] == (
        "fsm-core: the worker searching part 1 of 2 of agent_tree_wide "
        "(models/agent_tree_wide.toml) died "
        "(killed by SIGKILL); nothing is reported: --workers 1 checks it in one process"
    )


def test_a_ctrl_c_in_the_middle_of_a_message_stops_the_workers_without_a_word(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C that lands while a step is being written leaves the worker's pipe mid-message.
    The workers used to be sent None after it, read as the rest of the step, and print a
    ValueError traceback from the worker under "fsm-core: interrupted"."""
    sent = _partition._send

    def torn(conn: Any, message: Any) -> None:
        if message is not None and message[0] == "expand":
            buffers: list[pickle.PickleBuffer] = []
            head = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
            assert buffers, "a step of the vector search carries its keys out of band"
            conn.send((head, len(buffers)))
            for buffer in buffers[:-1]:  # and all of them but the last
                conn.send_bytes(buffer.raw())
            raise KeyboardInterrupt
        sent(conn, message)

    monkeypatch.setattr(_partition, "_send", torn)
    model = DEFAULT_MODELS[0]
    # The module's Dask cluster may be up in this process (its fixture is module-scoped and the
    # tests run in any order): only the processes this search started must be gone.
    before = set(multiprocessing.active_children())
    with pytest.raises(KeyboardInterrupt):
        check_partitioned(model, Source(_path(model).absolute()), 3, backend="vector")
    assert set(multiprocessing.active_children()) - before == set()
    assert capfd.readouterr() == ("", "")


# --- on a Dask cluster ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as local:
        yield local


def test_a_local_cluster_of_two_workers_finds_what_one_process_finds(cluster: Any) -> None:
    from distributed import Client

    from fsm_core.check._cluster import check_on_cluster

    path = models_dir() / "bench_S.toml"
    model = load_model(path)
    with Client(cluster) as client:  # type: ignore[no-untyped-call]
        report = check_on_cluster(client, model, Source(path))
    assert outcome(report) == outcome(check(model, liveness=False))
    assert report.mismatches() == []


def test_check_cluster_prints_what_one_process_prints(cluster: Any, tmp_path: Path) -> None:
    text = (models_dir() / "bench_S.toml").read_text(encoding="utf-8")
    small = tmp_path / "bench_small.toml"  # a bench-tier model: no liveness pass to keep here
    table = (models_dir() / "bench" / "turncancel.toml").as_posix()
    text = text.replace('tier = "default"', 'tier = "bench"')
    small.write_text(text.replace('"bench/turncancel.toml"', f'"{table}"'), encoding="utf-8")
    one = run("--workers", "1", str(small))
    there = run("--cluster", cluster.scheduler_address, str(small))
    assert there.code == one.code == 0
    assert only_progress(one.err + there.err, "bench_small")
    assert untimed(there.out) == untimed(one.out)


def test_check_cluster_checks_a_model_with_a_liveness_pass_here_saying_so(cluster: Any) -> None:
    one = run("--workers", "1", "bench_S")
    there = run("--cluster", cluster.scheduler_address, "bench_S")
    assert (there.code, one.code, one.err) == (0, 0, "")
    assert there.err == (
        "bench_S: checked in this process: its liveness pass needs the whole graph in one place\n"
    )
    assert untimed(there.out) == untimed(one.out)


def test_check_cluster_without_dask_exits_2_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    monkeypatch.delitem(sys.modules, "fsm_core.check._cluster", raising=False)
    monkeypatch.delattr(fsm_core.check, "_cluster", raising=False)
    r = run("--cluster", "tcp://127.0.0.1:8786", "bench_S")
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        "fsm-core: --cluster needs Dask distributed (distributed is not installed): "
        "pip install 'fsm-core[cluster]' (or uv sync --extra cluster)\n"
    )


def test_check_cluster_with_no_scheduler_there_exits_2_naming_the_address() -> None:
    pytest.importorskip("distributed")
    r = run("--cluster", "tcp://127.0.0.1:9", "bench_S")  # the discard port: nobody listens
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        "fsm-core: --cluster tcp://127.0.0.1:9: cannot reach a Dask scheduler: "
        "nothing listens at 127.0.0.1:9 (connection refused)\n"
    )


def test_check_cluster_at_a_host_name_that_does_not_resolve_exits_2_at_once() -> None:
    """Dask retries a name it cannot resolve for its whole connect timeout (10 s here); the
    check says so at once (RFC 2606 reserves ``.invalid``: it never resolves)."""
    pytest.importorskip("distributed")
    r = run("--cluster", "tcp://no-such-host.invalid:8786", "bench_S")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith(
        "fsm-core: --cluster tcp://no-such-host.invalid:8786: cannot reach a Dask scheduler: "
        "cannot resolve the host name 'no-such-host.invalid' ("
    )
