"""fsm_core: the executable, model-checked specification of turn cancellation and teardown.

The transition tables in ``specs/`` are the single source of truth. Load them, fire events
on a state and read the next state and the ordered effects::

    from fsm_core import load_spec

    agent = load_spec().machines["agent"]
    step = agent.fire(agent.initial, "cancel", cause="user", keep_inbox=False)
    assert step.row == "cancel.noop" and step.effects == ()   # idle cancel: nothing at all

Every public name is exported here (``_PARTS`` below says from where). The packages behind
them: :mod:`fsm_core.table` (load, validate, compile and interpret the tables),
:mod:`fsm_core.host` (a table hosted in a ``transitions`` machine), :mod:`fsm_core.runtime`
(the asyncio reference runtime), :mod:`fsm_core.check` (the model checker and its models),
:mod:`fsm_core.export` and :mod:`fsm_core.diagrams` (what ports and readers consume),
:mod:`fsm_core.testing` (scripted models, tools and gates for tests).
"""

import importlib
import typing

from fsm_core import _errors
from fsm_core._errors import *  # noqa: F403 (its __all__: the errors, each of them public)

if typing.TYPE_CHECKING:  # what mypy sees; at run time, __getattr__ below
    from fsm_core.diagrams import *  # noqa: F403
    from fsm_core.export import spec_to_json as spec_to_json
    from fsm_core.export import spec_to_text as spec_to_text
    from fsm_core.host import *  # noqa: F403
    from fsm_core.runtime import *  # noqa: F403
    from fsm_core.table import *  # noqa: F403

__version__: str
"""The installed distribution's version (``fsm-core --version``), read from its metadata on
first use, as every other name here is."""

_PARTS: dict[str, tuple[str, ...] | None] = {
    "fsm_core.table": None,
    "fsm_core.export": ("spec_to_json", "spec_to_text"),
    "fsm_core.host": None,
    "fsm_core.runtime": None,
    "fsm_core.diagrams": None,
}
"""The public modules whose names fsm_core exports: the whole of a module's ``__all__`` (None),
or the names given (export's others describe the export file, not the package). So each public
name is listed once, in the ``__all__`` of the module that makes it public (the errors: in
``fsm_core._errors``); the imports above show mypy the same names (a test compares them).

A name is imported on first use (PEP 562), so ``import fsm_core`` loads none of these modules
and ``fsm_core.load_spec`` loads only the tables. A first use imports the modules exported whole,
in this order, until one has the name. Each of them imports the ones before it anyway (the
runtime: table and host), so a name costs only its own module, but for :mod:`fsm_core.diagrams`
(last: it alone loads graphviz), whose names load the runtime as well. A name that is in none of
them imports them all before it fails; a name starting with ``_`` imports nothing."""

_SUBMODULES = {part.rpartition(".")[2]: part for part in _PARTS}
"""The submodules the package imported when it was not lazy, so ``fsm_core.table`` (which
mypy accepts after ``import fsm_core``) is still an attribute: imported on first use."""


def _names(part: str) -> tuple[str, ...]:
    """The names fsm_core exports from ``part``, importing it only if it exports all."""
    picked = _PARTS[part]
    if picked is None:
        return tuple(importlib.import_module(part).__all__)
    return picked


def _all() -> list[str]:
    """Every public name: what ``__all__`` is, computed on first use (it imports every part)."""
    return sorted({*_errors.__all__, *(name for part in _PARTS for name in _names(part))})


if not typing.TYPE_CHECKING:  # mypy sees the imports above, and refuses a name not among them

    def __getattr__(name: str) -> object:
        if name in _SUBMODULES:
            return importlib.import_module(_SUBMODULES[name])  # which binds it here
        if name == "__all__":
            value = _all()
        elif name == "__version__":
            from importlib.metadata import version  # noqa: PLC0415 - on first use only

            value = version("fsm-core")
        elif name.startswith("_"):  # no public name does: dunder probes import nothing
            raise AttributeError(f"module 'fsm_core' has no attribute {name!r}")
        else:
            part = next((part for part in _PARTS if name in _names(part)), None)
            if part is None:
                raise AttributeError(f"module 'fsm_core' has no attribute {name!r}")
            value = getattr(importlib.import_module(part), name)
        globals()[name] = value  # once: later lookups do not come here
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_all(), *_SUBMODULES})
