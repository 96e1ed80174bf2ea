"""``benchmarks/hook_bench.py`` runs and reports what it says; CI runs it a few times only.
The times are reported, never asserted: only the leak count is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "hook_bench.py"


@pytest.mark.timeout(120)
def test_the_hook_bench_leaks_nothing_and_reports_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--runs", "3"],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert re.fullmatch(
        r"Done\. runs=3 leaked=0 peer_leaked=\d+ median_ms=[\d.]+ p99_ms=[\d.]+ max_ms=[\d.]+ "
        r"peer_median_ms=[\d.]+ ratio=[\d.]+",
        last,
    ), last
