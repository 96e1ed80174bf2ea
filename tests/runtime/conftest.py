"""Shared fixtures of the runtime tests (tests/runtime/).

The tests here are plain sync functions that drive the runtime with ``asyncio.run`` (there is
no pytest-asyncio). They never sleep: they wait on a gate's ``reached`` event, on
``when_idle()``, on a signal, or on an event. A test asserting that something has not happened
waits for a later event the runtime orders after it, or for the idle loop
(:class:`tests.idle_loop.IdleLoop`), never for a count of ``asyncio.sleep(0)`` yields.
"""
