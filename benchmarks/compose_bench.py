"""How much faster the compiled composition checks agent and tree models than the interpreted
one it is tested against, both timed in one run, interleaved.

    python3 -m uv run --locked python benchmarks/compose_bench.py              # default models
    python3 -m uv run --locked python benchmarks/compose_bench.py --rounds 5 agent_races
    python3 -m uv run --locked python benchmarks/compose_bench.py --compiled-only agent_deep

Each round checks each model once per engine, the engines' order alternating from round to
round, as ``fsm-core check`` does (the liveness check included); a figure is the median over
the rounds, in CPU seconds of this process (the machine is shared: wall time would measure the
neighbours). Both engines must find the model's ``[expect]`` states and transitions. Speed
is reported, never asserted. The last line is for scripts: ``Done. model=states/s,...``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from fsm_core.check import Model, check, load_models

ENGINES = ("interpreted", "compiled")

MODELS = Path(__file__).resolve().parent.parent / "models"


def timed(model: Model, engine: str) -> tuple[float, int, int]:
    """Check ``model`` with ``engine`` as ``fsm-core check`` does: CPU seconds, states and
    transitions."""
    start = time.process_time()
    report = check(model, interpreted=engine == "interpreted")
    spent = time.process_time() - start
    return spent, report.result.states, report.result.transitions


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "models", nargs="*", help="model names (default: every default agent and tree model)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per engine (default 3)")
    parser.add_argument("--compiled-only", action="store_true", help="skip the interpreted engine")
    args = parser.parse_args(argv)
    found = {m.name: m for m in load_models(MODELS)}
    names = args.models or [
        m.name for m in found.values() if m.kind != "table" and m.tier == "default"
    ]
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"no model {', '.join(unknown)} in {MODELS}", file=sys.stderr)
        return 2
    engines = ENGINES[1:] if args.compiled_only else ENGINES
    header = f"{'model':22} {'states':>9} {'transitions':>12}"
    for engine in engines:
        header += f" {engine + ' s':>14} {'states/s':>10}"
    print(header + ("" if args.compiled_only else f" {'speed-up':>9}"))
    done: list[str] = []
    status = 0
    for name in names:
        model = found[name]
        seconds: dict[str, list[float]] = {e: [] for e in engines}
        for r in range(args.rounds):
            for engine in engines if r % 2 == 0 else engines[::-1]:
                spent, states, transitions = timed(model, engine)
                seconds[engine].append(spent)
                e = model.expect
                if e is not None and (states, transitions) != (e.states, e.transitions):
                    print(
                        f"{name} ({engine}): {states} states, {transitions} transitions; "
                        f"expected {e.states}, {e.transitions}",
                        file=sys.stderr,
                    )
                    status = 1
        line = f"{name:22} {states:>9,} {transitions:>12,}"
        rate: dict[str, float] = {}
        for engine in engines:
            median = statistics.median(seconds[engine])
            rate[engine] = states / median
            line += f" {median:>14.3f} {rate[engine]:>10,.0f}"
        if not args.compiled_only:
            line += f" {rate['compiled'] / rate['interpreted']:>8.1f}x"
        print(line, flush=True)
        done.append(f"{name}={','.join(f'{rate[e]:.0f}' for e in engines)}")
    print(f"Done. engines={','.join(engines)} rounds={args.rounds} {' '.join(done)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
