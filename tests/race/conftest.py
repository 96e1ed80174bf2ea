"""The race machines' shared set-up: the tables are loaded once, at collection, and HypoFuzz
is made to read this Hypothesis.

Every machine's runtime loads ``specs/`` (cached after the first load, which proves the tables
and takes about a second). Loading it here keeps that cost out of the first example: under
HypoFuzz (``hypothesis fuzz``, README "Race search") every example runs under line tracing,
where the first load would take most of a minute and be counted as that example's time.
"""

from __future__ import annotations

import sys

from fsm_core import load_spec

load_spec()

if "hypofuzz" in sys.modules:  # a ``hypothesis fuzz`` run (its CLI imported it)
    from hypothesis.internal.conjecture.data import ConjectureResult

    if not hasattr(ConjectureResult, "slice_comments"):
        # HypoFuzz 25.11.1 carries a shrunk failure's explanation as ``slice_comments``, which
        # Hypothesis 6.170 renamed ``span_comments``: without this, a fuzz worker dies on the
        # first failure it shrinks, leaving it saved unshrunk (test_fuzz.py's canary shows it).
        ConjectureResult.slice_comments = property(  # type: ignore[attr-defined]
            lambda self: self.span_comments
        )
