"""Shared pytest configuration: Hypothesis profiles.

Profiles:
- ``ci``: derandomized and reproducible; the default (CI and ``scripts/test``).
- ``dev``: more random examples for local work.
- ``deep``: long searches, e.g. ``scripts/test --hypothesis-profile=deep -k stateful``.

Select with ``--hypothesis-profile=NAME`` or the ``HYPOTHESIS_PROFILE`` environment variable.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile("deep", max_examples=5000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
