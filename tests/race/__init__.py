"""Race search: Hypothesis state machines that drive the real asyncio runtime against the
tables (issue 5).

- ``bridge``: :class:`LoopBridge`, a private event loop a synchronous machine steps rule by
  rule to the next point where every task waits;
- ``lockstep``: :class:`Recorder` records every event a ``HostedMachine`` fires as a tree,
  :class:`Oracle` replays it on the pure interpreter;
- ``agent``: :class:`AgentRaceMachine`, the agent's machine, built on both.

Neither ``bridge`` nor ``lockstep`` knows about agents: a machine over activation trees takes
a ``LoopBridge`` with its own ``settled`` predicate and a ``Recorder``/``Oracle`` pair per
activation's ``HostedMachine``.
"""
