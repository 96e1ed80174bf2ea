"""Argument types the subcommands share."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse ``type`` for a count that must be at least 1 (states, runs, processes).

    argparse names the flag in its error: ``argument --max-states: must be a positive
    integer, not '0'``, and exits 2.
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value
