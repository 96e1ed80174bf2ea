"""The model checker: prove the tables over the bounded models in ``models/``.

    from pathlib import Path

    from fsm_core.check import check, load_models

    for model in load_models(Path("models")):
        report = check(model)
        print(report.model.name, report.verdict, report.result.states)

:func:`check` explores a model breadth-first, so a violation comes with a shortest trace. It
checks, in every reachable state: each invariant of the table; the model's own properties
(``no_parked_wake`` for an agent, the tree properties for activations); deadlock freedom (a
state with no successor must be quiescent); and, for models small enough to keep their edges
(every tier but ``bench``), that a quiescent state is reachable from every state. It also
reports the rows no step ever took: a dead row is a finding about the table or the model.

Two backends explore, with the same results: ``check(model, backend="vector")`` takes a whole
level of a table model at once with NumPy (:mod:`fsm_core.check._vector`); ``"python"`` one
state at a time, as every agent and tree model; ``"auto"``, the default, the first that fits.

Where things are:

- the core: :mod:`._explore` is the search (breadth-first, parents for shortest traces, the
  liveness pass); :mod:`._property` the properties; :mod:`._moves` the labels a trace is made
  of; :mod:`._check` runs a model and picks the backend; :mod:`._modelfile` and :mod:`._config`
  read ``models/*.toml``; :mod:`._report` renders a report;
- :mod:`._system` wires a model to what explores it: a table model's generated successor
  function (:mod:`fsm_core.table._codegen`, shared with :class:`~fsm_core.HostedMachine`), or
  a composition;
- :mod:`._composed`: the agent and activation-tree compositions, interpreted and compiled;
- :mod:`._vector`: the NumPy backend for table models.

The tools built on the checker (bench, mutants, vectors, stories) are in :mod:`fsm_core.tools`.
"""

from fsm_core.check._check import Backend, Report, check
from fsm_core.check._config import Kind, Verdict
from fsm_core.check._explore import Progress, Result, Violation
from fsm_core.check._modelfile import Expectation, Model, load_model, load_models
from fsm_core.check._moves import Move
from fsm_core.check._property import DEADLOCK, QUIESCENCE, Predicate, Property, PropertyKind

__all__ = [
    "DEADLOCK",
    "QUIESCENCE",
    "Backend",
    "Expectation",
    "Kind",
    "Model",
    "Move",
    "Predicate",
    "Progress",
    "Property",
    "PropertyKind",
    "Report",
    "Result",
    "Verdict",
    "Violation",
    "check",
    "load_model",
    "load_models",
]
