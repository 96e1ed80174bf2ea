#!/usr/bin/env python3
# ---------------------------------------------------------------------------------------------
# THE BASELINE `fsm-core bench` MUST MATCH. A verbatim copy of shared/bench/ref_bfs.py, the
# hand-written Python BFS of FIGURES.md ("Python BFS, hand-written (dict with parent pointers,
# shortest trace)"), whose state counts SPIN, rumur, musil and minicheck agree with. Only this
# header block was added; every other line is the original, byte for byte:
#   original-sha256: 40df93088a6faf78bad88dfba165e51b3c45a7e2b1c07a6fc2128040355f0b6b
# (the sha256 of this file without this block, rule to rule; tests/test_bench.py checks it).
# Do not edit or reformat it: it is excluded from ruff, and fsm_core never imports it (the
# benchmark runs it as a script: python benchmarks/ref_bfs.py K T S C).
# ---------------------------------------------------------------------------------------------
"""Baseline: a plain hand-written explicit-state BFS for the bench model (bench-model.md).

State = tuple (phase, reason, latch, nt, ns, turns, disposed, sends, cancels), all small ints.
Usage: ref_bfs.py K T S C [--set] [--bug]
  --set : visited set only (no parent map, no counterexample trace)
  --bug : seeded bug (dispose does not override an existing cause) to time a refutation
"""
import sys
import time
from collections import deque

IDLE, RUNNING, CANCELLING, MAINT = 0, 1, 2, 3
NONE, USER, PARENT, DISPOSED = 0, 1, 2, 3
PHASES = ("idle", "running", "cancelling", "maintenance")
REASONS = ("none", "user", "parent", "disposed")
FIELDS = ("phase", "reason", "latch", "nt", "ns", "turns", "disposed", "sends", "cancels")


def make_successors(K, T, bug=False):
    def successors(s):
        phase, reason, latch, nt, ns, turns, disp, sends, cancels = s
        out = []
        if not disp:
            if sends > 0:
                # followup: queue for next turn and wake
                if nt < K:
                    out.append(("followup", (phase, reason, 1, nt + 1, ns, turns, disp, sends - 1, cancels)))
                # steer: into the running turn's next step, else behaves like followup
                if phase == RUNNING:
                    if ns < K:
                        out.append(("steer", (phase, reason, latch, nt, ns + 1, turns, disp, sends - 1, cancels)))
                elif nt < K:
                    out.append(("steer", (phase, reason, 1, nt + 1, ns, turns, disp, sends - 1, cancels)))
                # inject: queue for next turn, no wake
                if nt < K:
                    out.append(("inject", (phase, reason, latch, nt + 1, ns, turns, disp, sends - 1, cancels)))
            if cancels > 0:
                for cause, cname in ((USER, "user"), (PARENT, "parent")):
                    if phase == RUNNING:
                        p2, r2 = CANCELLING, cause
                    else:  # cancelling: first cause wins; idle/maintenance: nothing to cancel
                        p2, r2 = phase, reason
                    out.append(("cancel_%s_keep" % cname,
                                (p2, r2, latch, nt, ns, turns, disp, sends, cancels - 1)))
                    out.append(("cancel_%s_drop" % cname,
                                (p2, r2, 0, 0, 0, turns, disp, sends, cancels - 1)))
            if phase == IDLE:
                if latch and turns < T:
                    out.append(("claim", (RUNNING, NONE, 0, 0, 0, turns + 1, disp, sends, cancels)))
                out.append(("run_maintenance", (MAINT, NONE, latch, nt, ns, turns, disp, sends, cancels)))
            # dispose: holder (if any) is cancelled with cause 'disposed', overriding any earlier cause
            if phase == IDLE:
                out.append(("dispose", (IDLE, NONE, 0, nt, ns, turns, 1, sends, cancels)))
            else:
                r2 = reason if (bug and reason != NONE) else DISPOSED
                out.append(("dispose", (CANCELLING, r2, 0, nt, ns, turns, 1, sends, cancels)))
        if phase == RUNNING and ns > 0:
            out.append(("step", (phase, reason, latch, nt, ns - 1, turns, disp, sends, cancels)))
        if phase != IDLE:
            # release: the holder (turn or maintenance) ends; converge to idle, replaying the latch
            # if the inbox still has messages and the ended holder was not cancelled by dispose
            l2 = 1 if ((nt + ns) > 0 and reason != DISPOSED) else latch
            out.append(("release", (IDLE, NONE, l2, nt, ns, turns, disp, sends, cancels)))
        return out
    return successors


def invariants(T):
    return (
        ("cause_iff_cancelling", lambda s: (s[0] == CANCELLING) == (s[1] != NONE)),
        ("disposed_never_latches", lambda s: not (s[6] and s[2])),
        ("dispose_precedence", lambda s: not (s[6] and s[0] != IDLE) or s[1] == DISPOSED),
        ("latch_has_work", lambda s: not s[2] or (s[3] + s[4]) > 0),
    )


def quiescent(s):
    """The only states allowed to have no successor (no deadlock elsewhere)."""
    return s[6] == 1 and s[0] == IDLE


def initial(S, C):
    return (IDLE, NONE, 0, 0, 0, 0, 0, S, C)


def fmt(s):
    return "phase=%s reason=%s latch=%d nt=%d ns=%d turns=%d disposed=%d sends=%d cancels=%d" % (
        PHASES[s[0]], REASONS[s[1]], s[2], s[3], s[4], s[5], s[6], s[7], s[8])


def check(K, T, S, C, keep_parents=True, bug=False):
    succ = make_successors(K, T, bug)
    invs = invariants(T)
    init = initial(S, C)
    parent = {init: None} if keep_parents else None
    seen = parent if keep_parents else {init}
    queue = deque([init])
    transitions = 0
    while queue:
        s = queue.popleft()
        for name, pred in invs:
            if not pred(s):
                return len(seen), transitions, (name, s, trace(parent, s) if keep_parents else None)
        nexts = succ(s)
        if not nexts and not quiescent(s):
            return len(seen), transitions, ("deadlock", s, trace(parent, s) if keep_parents else None)
        for label, n in nexts:
            transitions += 1
            if n not in seen:
                if keep_parents:
                    parent[n] = (s, label)
                else:
                    seen.add(n)
                queue.append(n)
    return len(seen), transitions, None


def trace(parent, s):
    path = []
    while parent[s] is not None:
        prev, label = parent[s]
        path.append((label, s))
        s = prev
    path.append(("init", s))
    return path[::-1]


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    K, T, S, C = (int(a) for a in args[:4])
    t0 = time.perf_counter()
    n, tr, bad = check(K, T, S, C, keep_parents="--set" not in argv, bug="--bug" in argv)
    dt = time.perf_counter() - t0
    print("ref_bfs K=%d T=%d S=%d C=%d states=%d transitions=%d time=%.3fs rate=%.0f st/s"
          % (K, T, S, C, n, tr, dt, n / dt))
    if bad is None:
        print("OK: all invariants hold, no deadlock")
    else:
        name, s, tr_ = bad
        print("VIOLATION %s at %s" % (name, fmt(s)))
        if tr_:
            print("trace length %d" % (len(tr_) - 1))
            for label, st in tr_:
                print("  %-18s %s" % (label, fmt(st)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
