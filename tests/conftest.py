"""Shared pytest configuration: Hypothesis profiles.

Profiles:
- ``ci``: derandomized and reproducible; the default (CI and ``scripts/test``).
- ``dev``: more random examples for local work.
- ``deep``: long searches, e.g. ``scripts/test --hypothesis-profile=deep -k stateful``.
- ``fuzz``: random, with the example database named by ``FSM_CORE_FUZZ_DB`` (a directory, or a
  ``redis://`` URL); what ``hypothesis fuzz`` (HypoFuzz) runs the race machines under, and what
  replays the failures it saved there in plain pytest (README "Race search");
- ``fuzz-replay``: the ``fuzz`` database's saved failures replayed as they are, nothing new
  generated.

Select with ``--hypothesis-profile=NAME`` or the ``HYPOTHESIS_PROFILE`` environment variable.
"""

from __future__ import annotations

import gc
import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

FUZZ_DB = "FSM_CORE_FUZZ_DB"
"""The environment variable naming the ``fuzz`` profile's example database."""


def fuzz_database(where: str) -> ExampleDatabase:
    """The example database at ``where``: a Redis server for a ``redis://`` (or ``rediss://``)
    URL, which fuzzers on several machines can share, else a directory (shared by processes on
    one machine, or by machines through a shared filesystem)."""
    if where.startswith(("redis://", "rediss://", "unix://")):
        # Imported here: redis comes with the ``fuzz`` dependency group only.
        from hypothesis.extra.redis import RedisExampleDatabase
        from redis import Redis

        return RedisExampleDatabase(Redis.from_url(where))
    return DirectoryBasedExampleDatabase(where)


settings.register_profile(
    "ci",
    derandomize=True,
    # No example database: a run depends on the code alone, in CI's fresh clone and locally.
    database=None,
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# The random profiles say derandomize=False: where CI is set, Hypothesis's own defaults are
# derandomized, and a profile inherits them (HypoFuzz then refuses every test).
settings.register_profile("dev", derandomize=False, max_examples=200, deadline=None)
settings.register_profile(
    "deep", derandomize=False, max_examples=5000, deadline=None, print_blob=True
)
settings.register_profile(
    "fuzz",
    derandomize=False,
    # Neither opens anything yet: a directory is made at the first save, Redis connects then.
    database=fuzz_database(os.environ.get(FUZZ_DB, ".hypothesis/fuzz")),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz-replay",
    settings.get_profile("fuzz"),
    # What the fuzzers saved, replayed as it is: nothing generated, nothing shrunk.
    phases=[Phase.explicit, Phase.reuse],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# What collection leaves alive (the parsed conformance vectors: about 700,000 objects) is not
# frozen (``gc.freeze``) although every full collection walks it again. It once cost a third of
# the checker tests' time (``paused_gc`` counted the frozen objects at every search); with that
# fixed, freezing after collection was measured to save nothing (2026-12-04: a run of the
# default stage took 103.4 s frozen, 101.6 s not), and a search's ``paused_gc`` leaves a large
# block's objects to the collector where its caller froze any.


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the garbage now, once the session's fixtures are gone, and freeze the rest: an
    xdist worker does this before it tells the controller it finished. The collection pytest
    makes at exit then has nothing old to walk, so the worker exits within the 5 s execnet
    gives it before it interrupts the worker with SIGINT, which printed a KeyboardInterrupt
    traceback under a passing run."""
    gc.collect()
    gc.freeze()
