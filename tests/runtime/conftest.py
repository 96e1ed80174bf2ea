"""Shared fixtures of the runtime tests (tests/runtime/).

The tests here are plain sync functions that drive the runtime with ``asyncio.run`` (there is
no pytest-asyncio). They never sleep: they wait on a gate's ``reached`` event, on
``when_idle()``, on a signal, or on an event, and ``asyncio.sleep(0)`` appears only where a
test is about the loop-iteration boundary itself.
"""
