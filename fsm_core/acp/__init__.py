"""``fsm-core acp``: an fsm_core agent served over the Agent Client Protocol on stdio.

An editor (or any ACP client) starts ``fsm-core acp`` (or ``python -m fsm_core.acp``) and
talks JSON-RPC on its stdin and stdout. Each ACP session is one agent of one
:class:`~fsm_core.Runtime`:

- ``session/new`` creates an agent; ``session/prompt`` sends the prompt as a followup and
  answers when the turn that claimed it ends, with the stop reason of its outcome
  (``end_turn``, ``max_tokens``, ``refusal`` for ``blocked``, ``cancelled`` for ``aborted`` and
  ``disposed``; a failed turn answers a JSON-RPC error), streaming the reply as
  ``session/update`` notifications while the turn runs;
- ``session/cancel`` is ``agent.cancel(USER)`` (seed 000); the pending prompt answers
  ``cancelled``;
- ``session/close`` disposes the agent; closing stdin cancels every running prompt (``USER``:
  the client left), answers each ``cancelled``, writes out every answer, disposes every agent,
  then the process exits;
- the stdio MCP servers ``session/new`` lists start with the session and are its tools (named
  ``mcp__<server>__<tool>``, described in ``Request.tool_specs``, called with the turn's signal);
  every process of theirs is reaped when the session closes or the agent exits (``_mcp.py``);
- progress updates never wait for a client that stops reading stdout (a bounded queue merges,
  then drops them), so a cancel takes effect at once; answers wait for the client, and while
  256 of them wait, the agent reads no more requests (backpressure), so its memory stays
  bounded.

The model is pluggable (``--model MODULE:FACTORY``); the default :class:`EchoModel` answers
``echo: <prompt>`` with no network. Bad client input gets the JSON-RPC error response (quoting
the input in short) and the agent goes on serving; a bad notification is logged in one line.

    await serve(EchoModel())      # until the client closes stdin
"""

from fsm_core.acp._adapter import STOP_REASONS, AcpAgent, EchoModel, load_model, serve

__all__ = ["STOP_REASONS", "AcpAgent", "EchoModel", "load_model", "serve"]
