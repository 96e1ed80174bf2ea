"""``fsm-core acp``: an fsm_core agent served over the Agent Client Protocol on stdio.

An editor (or any ACP client) starts ``fsm-core acp`` (or ``python -m fsm_core.acp``) and
talks JSON-RPC on its stdin and stdout. Each ACP session is one agent, in a
:class:`~fsm_core.Runtime` of its own:

- ``initialize`` answers protocol version 1 (the only one spoken) and advertises exactly what
  is served: ``session/close``, and no image, audio or embedded context in prompts;
- ``session/new`` wants an absolute ``cwd`` that is a directory; the session's hooks run there;
- ``session/prompt`` (``text`` and ``resource_link`` blocks) sends the prompt as a followup and
  answers when the turn that claimed it ends, with the stop reason of its outcome
  (``end_turn``, ``max_tokens``, ``refusal`` for ``blocked``, ``cancelled`` for ``aborted`` and
  ``disposed``; a failed turn answers a JSON-RPC error), streaming the reply, and each tool
  call (``tool_call``, then ``tool_call_update``), as ``session/update`` notifications while
  the turn runs; each tool call is first put to the client (``session/request_permission``);
- a refused turn is left out of every later request (the history rule of the durable log);
- ``session/cancel``, and ``$/cancel_request`` naming a running prompt, are
  ``agent.cancel(USER)`` (seed 000); the pending prompt answers ``cancelled``;
- with ``--sessions DIR`` each session's log is kept there and ``session/load`` takes it up
  in a later process, streaming the conversation before it answers;
- ``session/close`` disposes the agent; an unknown session is ``-32002``; closing stdin
  cancels every running prompt (``USER``: the client left), answers each ``cancelled``,
  writes out every answer, disposes every agent, then the process exits;
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
