"""The race machines under HypoFuzz (``hypothesis fuzz``), briefly: CI's smoke run of the
documented fuzzing command (README "Race search"). Slow (about 45 s): the ``slow`` stage.

One ``hypothesis fuzz -n 2`` process fuzzes both race machines and :mod:`tests.race.fuzz_canary`
into one example database (a directory, as fuzzers on several machines share one). HypoFuzz runs
until stopped and takes no example count, so the run is bounded by what the database shows: it
stops once every race machine has run ``EXAMPLES`` examples and the canary's failure is saved
(``BOUND`` seconds at most, a watchdog and never the expected time). Then it fails if the fuzzer
saved a failure of a race machine, naming its program; and it proves that a saved failure is
seen, by finding the canary's, and that plain pytest replays it from the database (the
``fuzz-replay`` profile, which generates nothing). The fuzzer's output goes to a file whose tail
every failure message carries (a fuzzer that never started says why).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.race import fuzz_canary

pytest.importorskip(
    "hypofuzz", reason="needs the fuzz dependency group: python3 -m uv sync --group fuzz"
)

from hypofuzz.database import FailureState, HypofuzzDatabase
from hypofuzz.database.database import test_keys_key

ROOT = Path(__file__).resolve().parents[2]

MACHINES = (
    "tests/race/test_agent_race.py::TestAgentRaces",
    "tests/race/test_activation_race.py::TestActivationRaces",
)
CANARY = "tests/race/fuzz_canary.py::TestCanary"

EXAMPLES = 1
"""Examples each race machine has run under the fuzzer when the run stops, as its reports count
them: HypoFuzz reports after its first second of examples, then less and less often (after 7 s,
then after 40 s), so asking for more would mostly wait for a report."""

BOUND = 240.0
"""Seconds the run may take at most (a watchdog: it takes about 15 s on 2 idle cores)."""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(BOUND + 60)]


TAIL = 4000
"""Characters of the fuzzer's output each failure message quotes, from its end."""


@contextmanager
def fuzzing(targets: tuple[str, ...], db: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """One ``hypothesis fuzz -n 2`` process fuzzing ``targets`` into the database at ``db``, its
    output (stdout and stderr) written to ``log``, terminated (its whole process group: hub and
    workers) when the block ends.

    SIGTERM, not SIGINT: an interrupt lands inside an example, where HypoFuzz saves it as the
    test's failure (or fatal error), and prints a ``KeyboardInterrupt`` traceback; SIGTERM ends
    the processes between two instructions, and the database's writes are atomic renames."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "fuzz", "FSM_CORE_FUZZ_DB": str(db)}
    command = [
        str(Path(sysconfig.get_path("scripts")) / "hypothesis"),
        *("fuzz", "-n", "2", "--no-dashboard", "--", *targets),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is None:
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue


def tail(log: Path, ended: int | None) -> str:
    """What a failure message adds: how the fuzzer ended (None: it ran until stopped), and the
    end of its output."""
    status = "stopped by the test" if ended is None else f"exited by itself, status {ended}"
    text = log.read_text(encoding="utf-8", errors="replace")
    return f"\n--- hypothesis fuzz ({status}), {log}, last {TAIL} characters:\n{text[-TAIL:]}"


def runs(db: HypofuzzDatabase) -> dict[str, tuple[bytes, int]]:
    """Each fuzzed test's node id -> (its database key, the examples its latest report
    counts)."""
    seen: dict[str, tuple[bytes, int]] = {}
    for key in db.fetch(test_keys_key):
        for report in db.reports.fetch(key):
            examples = sum(report.status_counts.values())
            if examples >= seen.get(report.nodeid, (key, -1))[1]:
                seen[report.nodeid] = (key, examples)
    return seen


def failures(db: HypofuzzDatabase, key: bytes) -> list[str]:
    """The programs of the failures saved under ``key`` (shrunk or not), and a fatal error."""
    found: list[str] = []
    for state in (FailureState.SHRUNK, FailureState.UNSHRUNK):
        for choices in db.failures(state=state).fetch(key):
            observation = db.failure_observations(state=state).fetch(key, choices)
            found.append(observation.representation if observation else repr(choices))
    fatal = db.fatal_failures.fetch(key)
    if fatal is not None:
        found.append(fatal.traceback)
    return found


def shrunk_programs(db: HypofuzzDatabase, key: bytes) -> list[str]:
    """The programs of the shrunk failures saved under ``key`` whose observation (the program
    as text) is saved too: HypoFuzz writes a failure's choices first and its observation after,
    so a failure seen between the two writes has no program yet."""
    state = FailureState.SHRUNK
    observations = (
        db.failure_observations(state=state).fetch(key, choices)
        for choices in db.failures(state=state).fetch(key)
    )
    return [observation.representation for observation in observations if observation]


def node(target: str) -> str:
    return f"{target}::runTest"


def test_the_race_machines_fuzz_clean_and_a_found_failure_replays_in_pytest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    path.mkdir()
    directory = DirectoryBasedExampleDatabase(path)
    db = HypofuzzDatabase(directory)
    changed = threading.Event()
    directory.add_listener(lambda _event: changed.set())

    def done() -> bool:
        seen = runs(db)
        canary = seen.get(node(CANARY))
        shrunk = canary is not None and shrunk_programs(db, canary[0])
        return bool(shrunk) and all(
            node(m) in seen and (seen[node(m)][1] >= EXAMPLES or failures(db, seen[node(m)][0]))
            for m in MACHINES
        )

    log = tmp_path / "hypothesis-fuzz.log"
    deadline = time.monotonic() + BOUND
    with fuzzing((*MACHINES, CANARY), path, log) as fuzzer:
        while not done():
            if fuzzer.poll() is not None:
                break  # it collected nothing, or crashed
            changed.clear()
            if not changed.wait(max(0.0, deadline - time.monotonic())):
                break
        ended = fuzzer.poll()
    directory.clear_listeners()
    why = tail(log, ended)

    seen = runs(db)
    for machine in MACHINES:
        assert node(machine) in seen, f"HypoFuzz never started {machine}: {sorted(seen)}{why}"
        key, examples = seen[node(machine)]
        found = failures(db, key)
        assert not found, f"HypoFuzz found a failure of {machine}:\n" + "\n\n".join(found) + why
        assert examples >= EXAMPLES, f"{machine} ran {examples} examples in {BOUND:.0f} s{why}"
    assert set(seen) == {node(t) for t in (*MACHINES, CANARY)}, why

    # The canary's failure was seen, shrunk, and plain pytest replays it from the database.
    programs = shrunk_programs(db, seen[node(CANARY)][0])
    assert len(programs) == 1, f"{programs}{why}"
    assert "state.step(n=128)" in programs[0], f"{programs[0]}{why}"
    replay = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", CANARY],
        cwd=ROOT,
        env={**os.environ, "HYPOTHESIS_PROFILE": "fuzz-replay", "FSM_CORE_FUZZ_DB": str(path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "state.step(n=128)" in replay.stdout
    assert fuzz_canary.MESSAGE in replay.stdout
