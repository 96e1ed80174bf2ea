"""Tooling that exercises the checker and the runtime from outside: ``fsm-core bench`` (the
checker against the hand-written baseline), ``fsm-core mutants`` (planted bugs each check
must catch) and ``fsm-core vectors`` (the conformance vectors ports replay). Nothing here is
part of the checker or the runtime, and nothing is public API: use them through the command
line."""
