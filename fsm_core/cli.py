"""``fsm-core``: model-check the tables, print them, generate the diagrams.

Exit statuses, the same for every subcommand (README.md's table gives examples;
tests/test_readme.py keeps the two lists in step):

- 0: success: the models hold, the mutants die, the counts agree, the output is written.
- 1: a check failed: a violation, a missed ``[expect]``, a search cut short by
  ``--max-states``, a surviving mutant, counts that disagree, stale diagrams.
- 2: bad input, refused before anything runs wherever it can be (a malformed table or model
  file, an unknown name, a bad flag), output that cannot be written (a full disk, a
  standard output closed with ``>&-``), or a ``check --workers`` worker that died (killed)
  before its report.
- 130: interrupted (SIGINT): one line, no traceback, no trace file; a second one is ignored.
- 141: standard output's reader left (a pipe's reader closed it): quiet, as SIGPIPE would
  stop it.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import select
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from fsm_core._errors import (
    ECHO_LIMIT,
    FsmError,
    TransitionError,
    did_you_mean,
    echo,
    known,
    named,
)
from fsm_core._files import write_whole
from fsm_core._options import positive_int, seconds
from fsm_core._paths import models_dir

if TYPE_CHECKING:
    # The checker and the tables are imported by the subcommands that use them (the checker
    # alone is a tenth of a second): ``acp``, ``--help`` or a refused argument start sooner.
    from fsm_core.check import Model, Report
    from fsm_core.check._parallel import Source

INTERRUPTED = 130
"""The exit status after SIGINT (Ctrl-C): 128 + SIGINT, as a shell reports a process it killed."""
BROKEN_PIPE = 141
"""The exit status when standard output's reader has gone (``| head``): 128 + SIGPIPE, what
the shell reports for ``seq``, ``cat`` or ``grep`` in the same place, so a ``pipefail`` script
sees one status whichever tool the reader cut short."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fsm-core`` on ``argv`` (default: the command line); return the exit status.

    This is the one place where a fault becomes a message and a status: bad input (any
    :class:`FsmError` but a :class:`TransitionError`, which is a bug) is one line
    ``fsm-core: ...`` and 2; SIGINT is ``fsm-core: interrupted`` and 130; a reader that closed
    standard output early is a quiet 141; output that cannot be written is 2. Standard output
    is flushed here, so a full disk or a closed pipe shows as a status, not as a traceback
    from the interpreter's flush at exit.

    Standard output is looked at before the command line is read: closed (``>&-``) or open
    for reading only, it is 2 and one line; a pipe whose reader has already left is a quiet
    141. Either way nothing runs. Every message quotes an argument through :func:`echo` once
    it is longer than :data:`QUOTE_LIMIT` (:data:`~fsm_core._errors.ECHO_LIMIT` in argparse's
    own messages) or not printable. After the first SIGINT every later one is ignored: a second
    Ctrl-C cannot break into the shutdown, and in a caller that runs ``main`` in process
    SIGINT stays ignored after an interrupt.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    output = _standard_streams()
    if output == "closed":
        _say("fsm-core: cannot write output: standard output is closed (>&-); >/dev/null drops it")
        return 2
    if output == "read-only":
        _say("fsm-core: cannot write output: standard output is open for reading only")
        return 2
    if output == "reader gone":
        return BROKEN_PIPE
    parser = _parser(words)
    args, unknown = parser.parse_known_args(words)
    if unknown:
        parser.error(f"unrecognized arguments: {known(unknown)}")
    _merge_global_options(args, parser)
    with _first_interrupt_only():
        return _main(args, words)


def _main(args: argparse.Namespace, words: Sequence[str]) -> int:
    try:
        code = _run(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        _ignore_interrupts()  # a handler other than ours raised it (asyncio's, in acp)
        _say("fsm-core: interrupted")
        return INTERRUPTED
    except BrokenPipeError:
        _discard_stdout()
        return BROKEN_PIPE
    except TransitionError:
        raise  # a table refused a step the code took: a bug, and its traceback is the report
    except FsmError as e:
        _say(f"fsm-core: {_bounded(str(e), words)}")
        return 2
    except OSError as e:
        if e.filename is not None:  # creating, opening or renaming a named file failed
            _say(f"fsm-core: {_bounded(_shown_path(e.filename), words)}: {e.strerror}")
        else:  # writing failed; our writes to unnamed files are standard output's
            _discard_stdout()
            _say(f"fsm-core: cannot write output: {e.strerror or e}")
        return 2
    return code


QUOTE_LIMIT = 4 * ECHO_LIMIT
"""The longest argument (a path, mostly) a message of the command line shows as it is; a
longer one, or one that is not printable, is shown by :func:`echo` (80 characters, escaped)."""


def _bounded(message: str, words: Sequence[str], limit: int = QUOTE_LIMIT) -> str:
    """``message`` with each argument in ``words`` that it quotes, whole or as a flag's value
    (after ``--flag=`` or ``-f``), plainly or as its ``repr``, shown by :func:`echo` instead
    when it is longer than ``limit`` or not printable.

    The net under every message the command line prints: a value quoted by code that does
    not shorten it (argparse's ``invalid choice: 'AAA...'``, a path in an ``OSError``) is
    shortened here.
    """
    pieces = set(words)
    for word in words:
        if word.startswith("-"):
            pieces.add(word.partition("=")[2])
            if not word.startswith("--"):
                pieces.add(word[2:])
    for piece in sorted(pieces, key=len, reverse=True):
        if not piece.strip() or (len(piece) <= limit and piece.isprintable()):
            continue
        short = echo(piece)
        message = message.replace(repr(piece), short).replace(piece, short)
    return message


def _shown_path(path: object) -> str:
    """A path as a message names it: as it is, unless longer than :data:`QUOTE_LIMIT` or not
    printable (then by :func:`echo`)."""
    text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else str(path)
    return named(text, QUOTE_LIMIT)


def _say(line: str) -> None:
    """Print ``line`` on standard error; a standard error that cannot be written loses it."""
    with suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


_Output = Literal["writable", "closed", "read-only", "reader gone"]


def _standard_streams() -> _Output:
    """Make the standard descriptors safe to use, and say whether standard output can be
    written.

    A descriptor the caller closed (``>&-``, ``2>&-``, ``<&-``) is opened on the null
    device, so that no file this process opens later takes its number (a model file as
    descriptor 2 would receive a child's errors); a closed standard error becomes a stream to
    the null device, where ``print(file=sys.stderr)`` would otherwise write on standard output.
    Standard output itself is then ``closed`` when the caller closed it, ``read-only`` when
    it was opened for reading (``1</dev/null``), ``reader gone`` when it is a pipe nobody
    reads any more, and ``writable`` otherwise (a stream in memory included).
    """
    closed = {fd for fd in (0, 1, 2) if not _is_open(fd)}
    for fd in sorted(closed):
        null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if 2 in closed or sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the process
    if 1 in closed or sys.stdout is None:
        return "closed"
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # a stream in memory (a test's capture): always writable
        return "writable"
    if sys.platform != "win32":
        import fcntl  # noqa: PLC0415 - POSIX only

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            return "read-only"
    return "reader gone" if _reader_left() else "writable"


def _reader_left() -> bool:
    """True iff standard output is a pipe whose every reader has closed it (a write would
    fail with EPIPE), told without writing."""
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) or not hasattr(select, "poll"):
            return False
    except (AttributeError, OSError, ValueError):  # none, or a stream in memory
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poll.poll(0))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler while ``fsm-core`` runs: the first interrupt raises
    :class:`KeyboardInterrupt`, after ignoring every later one."""
    _ignore_interrupts()
    raise KeyboardInterrupt


def _ignore_interrupts() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def _first_interrupt_only() -> Iterator[None]:
    """Within the block, SIGINT raises :class:`KeyboardInterrupt` once and is then ignored
    (Python's own handler raises it again for a second Ctrl-C, even inside the interpreter's
    shutdown, which prints "Exception ignored in threading._shutdown"). Only where SIGINT has
    Python's handler, in the main thread: an ignored SIGINT stays ignored. The handler is
    restored after the block unless an interrupt came."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, _on_interrupt)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is _on_interrupt:
            signal.signal(signal.SIGINT, signal.default_int_handler)


class _Parser(argparse.ArgumentParser):
    """argparse, whose messages (an invalid choice, a bad value, an unknown argument) quote
    at most :data:`~fsm_core._errors.ECHO_LIMIT` characters of any argument in ``words``."""

    def __init__(self, *args: Any, words: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.words = words

    def error(self, message: str) -> NoReturn:
        super().error(_bounded(message, self.words, ECHO_LIMIT))


def _global_options(parser: argparse.ArgumentParser, *, after: bool) -> None:
    """The options of every subcommand, accepted before it (``fsm-core --specs D check``) or
    after it (``fsm-core check --specs D``). After it, each goes to a ``NAME_after`` field
    that is only set when given (:func:`_merge_global_options` joins the two)."""
    parser.add_argument(
        "--version", action=_VersionAction, help="print fsm-core's version and exit"
    )
    parser.add_argument(
        "--specs",
        type=Path,
        dest="specs_after" if after else "specs",
        default=argparse.SUPPRESS if after else None,
        metavar="DIR",
        help="read the tables from DIR instead of the shipped specs/, in every subcommand: a "
        "model's table in a directory named specs (../specs/agent.toml) is read as DIR/agent.toml; "
        "a table elsewhere, like the bench model's own models/bench/turncancel.toml, is not",
    )


GLOBAL_OPTIONS = ("specs",)
"""The options :func:`_global_options` adds that take a value, by field name."""


def _merge_global_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Each global option given after the subcommand, as if given before it; given on both
    sides with two values it is refused (which one was meant cannot be told)."""
    for name in GLOBAL_OPTIONS:
        if not hasattr(args, f"{name}_after"):
            continue
        after = getattr(args, f"{name}_after")
        delattr(args, f"{name}_after")
        before = getattr(args, name)
        if before is not None and before != after:
            parser.error(
                f"--{name} is given twice, {_shown_path(before)} before {args.command} and "
                f"{_shown_path(after)} after it: give it once"
            )
        setattr(args, name, after)


class _VersionAction(argparse.Action):
    """``--version``: print the version and exit. It is read only when asked, since the
    distribution's metadata would cost every other command a tenth of its start-up."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"fsm-core {_version()}\n")
        parser.exit()


def _version() -> str:
    """The installed distribution's version (:data:`fsm_core.__version__`)."""
    from fsm_core import __version__  # noqa: PLC0415 - resolved lazily by the package

    return __version__


def _parser(words: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line's parser; its messages shorten what they quote of ``words``."""
    parser = _Parser(
        words=words,
        prog="fsm-core",
        description="Executable specification of turn cancellation and multi-agent teardown.",
    )
    _global_options(parser, after=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        # What `fsm-core NAME --help` says first; a tool's own configure may say it instead.
        description = _DESCRIPTIONS.get(name, help[0].upper() + help[1:] + ".")
        p = sub.add_parser(name, help=help, description=description, words=words)
        _global_options(p, after=True)
        return p

    _configure_check(add("check", "model-check the bounded models in models/"))
    for name, (_, what) in _TOOLS.items():
        tool = add(name, what)
        if name in words:  # its options, and the imports behind them, only when it may run
            _tool(name).configure(tool)

    p_spec = add("spec", "print the transition tables")
    p_spec.add_argument("machine", nargs="*", help="machines to print (default: all)")
    p_spec.add_argument("--json", action="store_true", help="the JSON export ports consume")

    p_acp = add("acp", "serve an agent over the Agent Client Protocol on stdio")
    p_acp.add_argument(
        "--model",
        default=None,
        metavar="MODULE:FACTORY",
        help="the model: FACTORY() from the importable MODULE gives a ModelAdapter "
        "(default: an echo model, no network)",
    )
    p_acp.add_argument(
        "--hold",
        default=None,
        metavar="TEXT",
        help="echo model only: a prompt that is exactly TEXT waits until it is cancelled",
    )
    p_acp.add_argument(
        "--sessions",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep each session's durable log in DIR (SESSION_ID.jsonl) and serve session/load, "
        "so an editor reopens a conversation in a later process (default: sessions end with "
        "the process)",
    )
    for seam, when in (
        ("prompt", "before a turn's first step; a block ends the turn (stop reason refusal)"),
        ("tool", "before each approved tool call; a block answers the call blocked"),
        ("stop", "once a turn stopped; observe only"),
    ):
        p_acp.add_argument(
            f"--hook-{seam}",
            action="append",
            default=[],
            metavar="CMD",
            help=f"a shell command run as a {seam} hook, {when} (repeatable, run in order)",
        )

    p_diag = add("diagrams", "generate DOT (and SVG, when dot is present)")
    p_diag.add_argument("--out", type=Path, default=None, help="output directory")
    p_diag.add_argument(
        "--check", action="store_true", help="fail and name each stale file; write nothing"
    )
    return parser


_DESCRIPTIONS = {
    "mutants": "Plant each known bug (a mutant) in a copy of the tables (--spec, the default) "
    "or of the runtime's Python (--runtime) and prove the model checker, or the race tests, "
    "catch it. Prints a kill table; a mutant that survives fails the run (exit 1).",
    "spec": "Print the transition tables: each machine's states, variables, events, effects, "
    "rows and invariants, with the clause each row implements; --json prints the export file "
    "ports consume (specs/schema.json).",
    "acp": "Serve one agent of the reference runtime over the Agent Client Protocol "
    "(JSON-RPC on standard input and output) until the client closes standard input: an echo "
    "model by default, or --model's; shell hooks may block a prompt or a tool call.",
    "diagrams": "Draw each table as a Graphviz diagram: DOT always, SVG where Graphviz's dot "
    "is installed, into the shipped diagrams/ or --out DIR. --check writes nothing and names "
    "each stale file (exit 1).",
}
"""The descriptions ``fsm-core NAME --help`` prints for the subcommands whose one-line help
says too little; the others' is their help, or what their tool's configure sets."""

_TOOLS = {
    "bench": ("fsm_core.tools._bench", "time the checker against the baseline BFS"),
    "mutants": ("fsm_core.tools._mutants", "prove every planted table bug is caught"),
    "vectors": ("fsm_core.tools._vectors", "generate the conformance vectors ports replay"),
    "view": ("fsm_core.tools._view", "write one HTML page to explore the tables and traces"),
}
"""The subcommands whose options and run live in a module of :mod:`fsm_core.tools`: each is
imported only by a command line that names it (any word, so an abbreviated ``--spec DIR``
before it cannot hide it), which keeps their imports out of every ``check``."""


def _tool(name: str) -> ModuleType:
    return importlib.import_module(_TOOLS[name][0])


class _Refused(FsmError):
    """Bad input the command line itself finds: an unknown model or machine, a bad flag."""


def _acp(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin. The ACP package (and pydantic) load only here."""
    # Refused before the ACP package loads (a third of a second of pydantic models).
    if sys.stdin is None:
        raise _Refused("acp: standard input is closed (<&-): the client's requests arrive there")
    if args.model is not None and args.hold is not None:
        raise _Refused("--hold applies to the echo model only; drop it or --model")
    if args.sessions is not None:
        _directory("--sessions", args.sessions)

    import asyncio  # noqa: PLC0415

    from fsm_core import acp  # noqa: PLC0415 - the other subcommands need not load it
    from fsm_core.runtime import Hooks, ModelAdapter  # noqa: PLC0415

    model: ModelAdapter
    if args.model is None:
        model = acp.EchoModel(hold=args.hold)
    else:
        try:
            model = acp.load_model(args.model)()
        except ValueError as error:
            module, _, factory = args.model.partition(":")
            raise _Refused(
                _bounded(str(error), [args.model, module, factory], ECHO_LIMIT)
            ) from None
    try:
        hooks = Hooks(prompt=args.hook_prompt, tool=args.hook_tool, stop=args.hook_stop)
    except TypeError as error:
        raise _Refused(str(error).replace("Hooks.", "--hook-")) from None
    # asyncio's own SIGINT handler cancels the serving task first (see _first_interrupt_only).
    ours = signal.getsignal(signal.SIGINT)
    if ours is _on_interrupt:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sessions = args.sessions.absolute() if args.sessions is not None else None
        asyncio.run(acp.serve(model, hooks=hooks, sessions=sessions))
    finally:
        if ours is _on_interrupt and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_interrupt)
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.specs is not None:
        _directory("--specs", args.specs)
    if args.command == "check":
        return _check(args)
    if args.command in _TOOLS:
        status: int = _tool(args.command).run(args)
        return status
    if args.command == "acp":
        return _acp(args)
    if args.command == "diagrams" and args.specs is not None and args.out is None:
        raise _Refused(
            "diagrams with --specs needs --out DIR: the default directory holds the shipped "
            "tables' diagrams"
        )
    from fsm_core.table import load_spec  # noqa: PLC0415 - see the imports

    spec = load_spec(args.specs)
    if args.command == "spec":
        unknown = [m for m in args.machine if m not in spec.machines]
        if unknown:
            names = ", ".join(spec.machines)
            raise _Refused(f"unknown machine {echo(unknown[0])} (machines: {names})")
        chosen = args.machine or list(spec.machines)
        from fsm_core.export import spec_to_json, spec_to_text  # noqa: PLC0415

        if args.json:
            # ASCII escapes keep the export printable on any terminal; JSON readers undo them.
            print(json.dumps(spec_to_json(spec, chosen), indent=2))
        else:
            print(spec_to_text(spec, chosen), end="")
        return 0

    from fsm_core.diagrams import (  # noqa: PLC0415
        check_diagrams,
        default_out_dir,
        svg_skipped,
        write_diagrams,
    )

    out = args.out if args.out is not None else default_out_dir()
    if args.check:
        stale = check_diagrams(spec, out)
        for problem in stale:
            print(f"stale: {problem}", file=sys.stderr)
        if stale:
            print("fsm-core: diagrams are stale; run `fsm-core diagrams`", file=sys.stderr)
            return 1
        print(f"diagrams up to date in {out}")
        return 0
    for path in write_diagrams(spec, out):
        print(f"wrote {path}")
    skipped = svg_skipped()
    if skipped is not None:
        print(skipped, file=sys.stderr)
    return 0


def _directory(flag: str, path: Path) -> None:
    """Refuse ``flag``'s ``path`` unless it is a directory."""
    try:
        if path.is_dir():
            return
        fault = "not a directory" if path.exists() else "no such directory"
    except OSError as e:  # a name too long for the file system, a loop of links
        fault = e.strerror or str(e)
    raise _Refused(f"{flag} {_shown_path(path)}: {fault}")


def _is_file(path: Path) -> bool:
    """True iff ``path`` is a regular file; a name the file system refuses is none."""
    try:
        return path.is_file()
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    """True iff ``path`` is a directory; a name the file system refuses is none."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _discard_stdout() -> None:
    """Point standard output at the null device (the recipe of Python's ``signal`` docs).

    What it still buffers can never be written, and the interpreter's flush at exit would
    fail on it again, print "Exception ignored" and exit 120.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no descriptor: a stream in memory, which flushes nowhere
        pass
    finally:
        os.close(devnull)


# --- check ----------------------------------------------------------------------------------------


def _configure_check(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Explore every reachable state of each model breadth-first and prove the tables' "
        "invariants, the model's properties, deadlock freedom and reachable quiescence. "
        "A violation prints its shortest trace; a row never taken and a notifying effect "
        "nothing re-enters (unless the model says why) are findings."
    )
    p.add_argument(
        "model",
        nargs="*",
        help="model names (file stems in models/), model files, or directories of models (each "
        "default-tier *.toml in it); default: every default-tier model in models/",
    )
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument(
        "--trace-format",
        choices=("text", "itf"),
        default=None,
        help="counterexamples as numbered steps (text, the default) or Apalache ITF JSON (itf); "
        "with --json, the format of --trace-out's files",
    )
    p.add_argument(
        "--trace-out",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the counterexample to PATH, or each to PATH.<model>.<ext> when several "
        "models are checked; refused before checking if such a file exists, unless --force",
    )
    p.add_argument(
        "--force", action="store_true", help="with --trace-out: overwrite existing trace files"
    )
    p.add_argument(
        "--accept",
        action="store_true",
        help="after a deliberate change, record each model's numbers as its [expect] "
        "(rewriting only that table of its file, comments kept; added if it has none); "
        "a model with a violation is refused",
    )
    p.add_argument(
        "--max-states",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop a model after N states (its verdict is then incomplete: nothing is proven)",
    )
    p.add_argument(
        "--backend",
        choices=("auto", "vector", "python"),
        default="auto",
        help="the explorer: vector (NumPy, a whole BFS level at once; table models only), "
        "python (one state at a time; every model), or auto (the default): vector wherever a "
        "model fits. Both find the same counts and traces",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="check up to N models at once in N worker processes (default: the cores this "
        "process may use); 1 checks them one after another in this process. A large bench-tier "
        "agent or tree model checked alone has its search partitioned across N processes "
        "instead. The "
        "output is the same but for the timings",
    )
    p.add_argument(
        "--progress-after",
        type=seconds,
        default=PROGRESS_AFTER,
        metavar="SECONDS",
        help="print a progress line on stderr about once a second once a model's check has run "
        f"SECONDS (default {PROGRESS_AFTER:g}: a quick check prints none; 0: from its first "
        "second)",
    )
    p.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="partition each model's search across the workers of the Dask scheduler at "
        "ADDRESS (tcp://HOST:8786), which need fsm-core and the same models and tables; "
        "needs the cluster extra (pip install 'fsm-core[cluster]')",
    )


def _select_models(chosen: Sequence[str], specs: Path | None) -> list[tuple[Model, Source]]:
    """Every default-tier model, or the named ones, each with where a worker loads it again.

    A name is a shipped model's file stem, else a path: a model file, or a directory whose
    default-tier models (``*.toml``) are all checked. A model is shown by the path as typed
    (``my_agent.toml`` stays relative, ``/tmp/m.toml`` absolute)."""
    from fsm_core.check import load_model, load_models  # noqa: PLC0415 - see the imports
    from fsm_core.check._parallel import Source  # noqa: PLC0415

    root = models_dir()
    # A worker may run in another directory (the forkserver's): it gets absolute paths.
    again = specs.absolute() if specs is not None else None
    if not chosen:
        # load_models names each model root.name/FILE, as the named ones below are.
        return [
            (m, Source(root.absolute() / Path(m.file).name, m.file, again))
            for m in load_models(root, specs=specs)
            if m.tier == "default"
        ]
    out: list[tuple[Model, Source]] = []
    for name in chosen:
        path = Path(name)
        shipped = root / f"{name}.toml"
        by_path = path.suffix == ".toml" or len(path.parts) > 1 or name.endswith(os.sep)
        if not by_path and _is_file(shipped):
            display = f"{root.name}/{shipped.name}"
            model = load_model(shipped, display, specs=specs)
            out.append((model, Source(shipped.absolute(), display, again)))
        elif _is_dir(path):
            found = [
                (m, Source(p.absolute(), m.file, again))
                for p in sorted(path.glob("*.toml"))
                for m in [load_model(p, os.path.join(name, p.name), specs=specs)]
            ]
            if not any(m.tier == "default" for m, _ in found):
                raise _Refused(
                    f"{_shown_path(name)}: no default-tier model (*.toml) in the directory"
                )
            out += [(m, s) for m, s in found if m.tier == "default"]
        elif by_path:
            if not _is_file(path):
                raise _Refused(f"no model file {_shown_path(name)}")
            out.append((load_model(path, name, specs=specs), Source(path.absolute(), name, again)))
        else:
            stems = [p.stem for p in sorted(root.glob("*.toml"))]
            raise _Refused(
                f"unknown model {echo(name)} ({did_you_mean(name, stems)}models: "
                f"{', '.join(stems)}; or a model file's path, or a directory of models)"
            )
    _unique([m for m, _ in out])
    return out


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the system has one), at least 1:
    ``--workers``' default."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _unique(models: list[Model]) -> list[Model]:
    """``models``, refused if two share a name.

    The report's rows, its JSON and the trace files are all named by model, so a second
    model of the same name would be indistinguishable from the first, and its trace would
    overwrite the first one's. Refusing beats inventing names a user cannot predict.
    """
    seen: dict[str, Model] = {}
    for m in models:
        if m.name in seen:
            raise _Refused(
                f"model name {echo(m.name)} is used twice ({seen[m.name].file}, {m.file}): a run "
                "names its report and trace files by model; give one a different [model] name"
            )
        seen[m.name] = m
    return models


PROGRESS_AFTER = 2.0
"""Seconds a check runs before it reports progress (``--progress-after``'s default): a quick
one prints nothing."""


def _progress(name: str, after: float = PROGRESS_AFTER) -> Callable[[int, int, int, float], None]:
    """Print a progress line on stderr, as TLC and SPIN do, about once a second once a check
    has run for ``after`` seconds; whole lines, a terminal's or a log's.

    The seconds count from when the reporter is made, as a model's check is started (in a
    worker: handed out), or from the search's own start, whichever is earlier: a model whose
    worker first spends seconds proving its tables reports at its search's first tick.

    Each call (about once a second) also looks whether standard output's reader has left,
    and stops the check then with :class:`BrokenPipeError` (141): its report has nowhere to
    go, so the rest of the search would be work for nobody.
    """
    started = time.monotonic()

    def report(states: int, frontier: int, depth: int, elapsed: float) -> None:
        if _reader_left():
            raise BrokenPipeError(errno.EPIPE, "standard output's reader left")
        if max(elapsed, time.monotonic() - started) < after:
            return
        rate = states / elapsed if elapsed > 0 else 0.0
        print(
            f"{name}: states={states} frontier={frontier} depth={depth} states/s={rate:.0f}",
            file=sys.stderr,
            flush=True,
        )

    return report


def _cluster_client(address: str) -> Callable[[], Any]:
    """What connects to the Dask scheduler at ``address``; refused when Dask is not installed."""
    try:
        from fsm_core.check import _cluster  # noqa: PLC0415
    except ImportError as e:
        raise _Refused(
            f"--cluster needs Dask distributed ({e.name} is not installed): "
            "pip install 'fsm-core[cluster]' (or uv sync --extra cluster)"
        ) from None
    return lambda: _cluster.connect(address)


def _check_on_cluster(
    connect: Callable[[], Any],
    jobs: Sequence[tuple[Model, Source]],
    args: argparse.Namespace,
    done: Callable[[Report], None],
) -> list[Report]:
    """Each model checked on the cluster, one after another; a model whose search cannot be
    split (:func:`~fsm_core.check._parallel.unpartitioned`) is checked here, saying so."""
    from fsm_core.check import _cluster, check  # noqa: PLC0415
    from fsm_core.check._parallel import unpartitioned  # noqa: PLC0415

    reports: list[Report] = []
    with connect() as client:
        for model, source in jobs:
            local = unpartitioned(model)
            if local is not None:
                print(f"{model.name}: checked in this process: {local}", file=sys.stderr)
                reports.append(
                    check(
                        model,
                        progress=_progress(model.name, args.progress_after),
                        max_states=args.max_states,
                        backend=args.backend,
                    )
                )
            else:
                reports.append(
                    _cluster.check_on_cluster(
                        client,
                        model,
                        source,
                        progress=_progress(model.name, args.progress_after),
                        max_states=args.max_states,
                        backend=args.backend,
                    )
                )
            done(reports[-1])
    return reports


def _expected_violation(r: Report) -> bool:
    """The model records this very violation in its ``[expect]`` (a known-bad model)."""
    e = r.model.expect
    return r.violation is not None and e is not None and e.verdict == "violation"


def _trace_paths(out: Path, models: Sequence[Model], force: bool) -> dict[str, Path]:
    """Where each model's trace would go: ``out`` for one model, ``out.<model>.<ext>`` for
    several, so a script knows the file before the run; refused (before any check) if one
    cannot be written or, unless ``force``, already exists."""
    several = len(models) > 1
    paths = {
        m.name: out.with_name(f"{out.stem}.{m.name}{out.suffix}") if several else out
        for m in models
    }
    for path in paths.values():
        shown = _shown_path(path)
        try:
            if not path.parent.is_dir():
                raise _Refused(f"--trace-out {shown}: no directory {_shown_path(path.parent)}")
            if path.exists() and not path.is_file():  # a directory, /dev/null, a FIFO
                raise _Refused(f"--trace-out {shown}: not a regular file")
            if path.exists() and not force:
                raise _Refused(f"--trace-out {shown}: the file exists; --force overwrites it")
        except OSError as e:  # a name too long for the file system, a loop of links
            raise _Refused(f"--trace-out {shown}: {e.strerror or e}") from None
    return paths


def _surprises(report: Report) -> tuple[str, ...]:
    """The rows ``report``'s model never took that its ``[expect] untaken`` does not name."""
    known = report.model.expect.untaken if report.model.expect is not None else ()
    return tuple(r for r in report.dead_rows if r not in known)


def _no_trace(report: Report, path: Path) -> str:
    """What ``--trace-out`` says for a model that holds: no counterexample, nothing written
    (an older file at ``path``, which ``--force`` allowed, stays as it was)."""
    left = "; the file there is left as it was" if path.exists() else ""
    found = "holds" if report.result.complete else "was cut short before any violation"
    return f"{report.model.name} {found}: no counterexample, nothing written to {path}{left}"


def _check(args: argparse.Namespace) -> int:
    # The checker, imported by the one subcommand that runs it (see the imports).
    from fsm_core.check import check  # noqa: PLC0415
    from fsm_core.check._parallel import check_in_workers, partitions, warm_up  # noqa: PLC0415
    from fsm_core.check._report import (  # noqa: PLC0415
        Summary,
        done_line,
        format_trace,
        print_wrapped,
        symmetry_lines,
        to_itf,
        to_json,
        violation_heading,
    )

    if args.json and args.trace_format is not None and args.trace_out is None:
        raise _Refused("--trace-format with --json needs --trace-out: the JSON has both forms")
    if args.force and args.trace_out is None:
        raise _Refused("--force applies only to --trace-out")
    if args.accept and args.max_states is not None:
        raise _Refused("--accept records a whole search; drop --max-states")
    trace_format = args.trace_format or "text"
    start = time.perf_counter()
    if args.cluster is not None:
        connect = _cluster_client(args.cluster)  # refused before any model is loaded
    elif (args.workers or usable_cores()) > 1 and len(args.model) != 1:
        warm_up()  # the workers' server imports the checker while this process loads models
    jobs = _select_models(args.model, args.specs)
    models = [m for m, _ in jobs]
    paths = {} if args.trace_out is None else _trace_paths(args.trace_out, models, args.force)

    summary = Summary(models, limited=args.max_states is not None)
    rows = 0

    def done(r: Report) -> None:
        """Each model's row as soon as its check ends (the header with the first), so a run
        stopped midway has printed whole rows only, and one stopped before any nothing."""
        nonlocal rows
        if r.fallback is not None and (args.backend == "vector" or r.model.kind == "table"):
            print(f"{r.model.name}: explored by the python backend: {r.fallback}", file=sys.stderr)
        if not args.json:
            print(*([summary.header()] if not rows else []), summary.row(r), sep="\n", flush=True)
            rows += 1

    workers = min(args.workers or usable_cores(), len(jobs))
    reports: list[Report] = []
    if args.cluster is not None:
        reports = _check_on_cluster(connect, jobs, args, done)
    elif partitions(models[0], args.workers or usable_cores(), len(models)):
        # Imported here, as check imports the vector backend: NumPy costs every other command.
        from fsm_core.check._partition import check_partitioned  # noqa: PLC0415

        model, source = jobs[0]
        r = check_partitioned(
            model,
            source,
            args.workers or usable_cores(),
            progress=_progress(model.name, args.progress_after),
            max_states=args.max_states,
            backend=args.backend,
        )
        done(r)
        reports.append(r)
    elif workers > 1:  # in processes, each loading its model again from its file
        reports = check_in_workers(
            jobs,
            workers,
            progress=lambda name: _progress(name, args.progress_after),
            on_report=done,
            max_states=args.max_states,
            backend=args.backend,
        )
    else:
        for m in models:
            r = check(
                m,
                progress=_progress(m.name, args.progress_after),
                max_states=args.max_states,
                backend=args.backend,
            )
            done(r)
            reports.append(r)
    accepted, refused = _accept(reports, {m.name: source.path for m, source in jobs}, args)
    failed = bool(refused) or any(
        (r.verdict != "ok" and not _expected_violation(r))
        or (r.mismatches() and r.model.name not in accepted)
        or r.unreacted
        or r.unreached
        for r in reports
    )
    violating = [r for r in reports if r.violation is not None]

    written: list[str] = []
    if paths:
        for r in reports:
            if r.violation is None:
                written.append(_no_trace(r, paths[r.model.name]))
                continue
            path = paths[r.model.name]
            if trace_format == "itf":
                text = json.dumps(to_itf(r), indent=2) + "\n"
            else:
                text = format_trace(r)
            try:
                write_whole(path, text)
            except OSError as e:
                raise _Refused(
                    f"cannot write the trace of {r.model.name} to {_shown_path(path)}: "
                    f"{e.strerror or e}"
                ) from None
            written.append(f"{r.model.name}: wrote the {trace_format} trace to {path}")

    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps(to_json(reports, seconds), indent=2))
        for line in [*written, *accepted.values(), *refused]:
            print(line, file=sys.stderr)
        return 1 if failed else 0

    for line in symmetry_lines(reports):
        print(line)
    for r in reports:
        if r.verdict == "incomplete":  # its figures are the cut's: [expect] says nothing here
            print_wrapped(
                f"incomplete: {r.model.name} cut at {r.result.states} states by --max-states "
                f"{args.max_states}: nothing is proven"
                + (", [expect] not compared" if r.model.expect is not None else "")
            )
            continue
        for mismatch in r.mismatches() if r.model.name not in accepted else ():
            print(f"mismatch: {r.model.name} ({r.model.file}) [expect] {mismatch}")
    for r in violating:
        print(f"\n{violation_heading(r)}")
        if trace_format == "itf" and args.trace_out is None:
            print(json.dumps(to_itf(r), indent=2))
        else:
            print(format_trace(r), end="")
    if written:
        print()
        print("\n".join(written))
    findings = [(r, _surprises(r)) for r in reports if r.result.complete]
    findings = [(r, dead) for r, dead in findings if dead]
    unreacted = [r for r in reports if r.unreacted]
    unreached = [r for r in reports if r.unreached]
    if findings or unreacted or unreached:
        print()
    for r, dead in findings:
        count = len(dead)
        print_wrapped(
            f"finding: {r.model.name}: {count} row{'s' if count != 1 else ''} never taken: "
            f"{', '.join(dead)}"
        )
    for r in unreacted:
        count, them = len(r.unreacted), "them" if len(r.unreacted) != 1 else "it"
        print_wrapped(
            f"finding: {r.model.name}: {count} notifying effect{'s' if count != 1 else ''} "
            f"nothing re-enters: {', '.join(r.unreacted)} (re-enter {them} in [environment] "
            f"reactions, or say why not in [environment] unreacted of {r.model.file})"
        )
    for r in unreached:
        count = len(r.unreached)
        print_wrapped(
            f"finding: {r.model.name}: {count} notifying effect{'s' if count != 1 else ''} "
            f"re-entered in name only, no step made a call inside: {', '.join(r.unreached)} "
            f"(raise the budgets that reach {'them' if count != 1 else 'it'}, or drop "
            f"{'them' if count != 1 else 'it'} from [environment] reactions and say why in "
            f"[environment] unreacted of {r.model.file})"
        )
    if accepted or refused:
        print()
        print("\n".join([*accepted.values(), *refused]))
    print(done_line(reports, time.perf_counter() - start))
    return 1 if failed else 0


def _accept(
    reports: Sequence[Report], paths: dict[str, Path], args: argparse.Namespace
) -> tuple[dict[str, str], list[str]]:
    """With ``--accept``: each model's ``[expect]`` rewritten from its report, the line saying
    what changed by model, and the refusals; else nothing."""
    if not args.accept:
        return {}, []
    from fsm_core.check._accept import AcceptRefused, accept  # noqa: PLC0415

    accepted: dict[str, str] = {}
    refused: list[str] = []
    for r in reports:
        try:
            accepted[r.model.name] = f"accepted: {accept(r, paths[r.model.name])}"
        except AcceptRefused as e:
            refused.append(f"not accepted: {e}")
    return accepted, refused
