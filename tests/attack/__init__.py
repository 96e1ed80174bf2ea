"""The attack suite (issue 24): hostile and careless input at every surface, each probe bounded.

Every test here is marked ``attack`` (``conftest.py`` beside this file marks them), so a
maintainer reruns the whole round with ``scripts/test -m attack``; CI runs them with the rest.
Each asserts the bound that is the point (bytes read, lines logged, processes left), never a
wall-clock time. README.md, "The attack suite", says what each surface is thrown.
"""
