"""Composed models: a table wired to others and to an environment (``agent``, ``activation-tree``).

:mod:`._compose` is the interpreted engine every composed kind runs on; :mod:`._agent` and
:mod:`._tree` declare what each kind adds (layout, ghosts, environment, properties);
:mod:`._compiled` is the same engine over packed states and generated row code, which the
explorer uses, and which ``tests/test_compiled.py`` proves equal to the interpreted one.
"""
