"""Argument types the subcommands share."""

from __future__ import annotations

import argparse
import math
import sys

from fsm_core._errors import echo


def positive_int(text: str) -> int:
    """An argparse ``type`` for a count that must be at least 1 (states, runs, processes).

    argparse names the flag in its error: ``argument --max-states: must be a positive
    integer, not '0'``, and exits 2. The value is quoted by :func:`~fsm_core._errors.echo`,
    so 100,000 digits give an 80-character quote; digits past what Python converts (4,300 by
    default) are refused as too many, not as "not an integer".
    """
    try:
        value = int(text)
    except ValueError:
        digits = text.strip().lstrip("+").replace("_", "")
        if digits.isdigit() and len(digits) > sys.get_int_max_str_digits() > 0:
            raise argparse.ArgumentTypeError(
                f"must be a positive integer of at most {sys.get_int_max_str_digits()} digits, "
                f"not {echo(text)} ({len(digits)} digits)"
            ) from None
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {echo(text)}")
    return value


def seconds(text: str) -> float:
    """An argparse ``type`` for a finite number of seconds from 0 (``--progress-after``)."""
    value = _seconds(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"a number of seconds from 0, not {echo(text)}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse ``type`` for a positive, finite number of seconds (a ``--timeout``)."""
    value = _seconds(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"a positive number of seconds, not {echo(text)}")
    return value


def _seconds(text: str) -> float:
    """``text`` as a float; NaN (refused by every caller's range) where it is not one."""
    try:
        return float(text)
    except ValueError:
        return math.nan
