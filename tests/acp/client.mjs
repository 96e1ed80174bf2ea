// The official-client scenarios driven by the TypeScript SDK (@agentclientprotocol/sdk, the
// directory in $ACP_SDK): `node client.mjs SUITE DIRS_JSON COMMAND...` spawns COMMAND (the
// agent, through the wire tap), runs SUITE ("main" or "tools"; the same scenarios as
// scenarios.py) and prints what it saw as one JSON object, then the agent's exit status.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const acp = await import(pathToFileURL(join(process.env.ACP_SDK, "dist/v1/stable/acp.js")).href);
const [suite, dirsJson, ...command] = process.argv.slice(2);
const dirs = JSON.parse(dirsJson);

function compact(update) {
  const kind = update.sessionUpdate;
  if (kind === "agent_thought_chunk" || kind === "agent_message_chunk") return [kind, update.content.text];
  if (kind === "tool_call") return [kind, update.toolCallId, update.title, update.status ?? null, update.rawInput ?? null];
  if (kind === "tool_call_update") return [kind, update.toolCallId, update.status ?? null, update.rawOutput ?? null];
  return [kind];
}

// What the client records: each session's updates in order, and each permission request.
const updates = new Map();
const waiters = new Map();
const policy = new Map();
const asked = new Map();
const held = new Map();
const withdrawn = [];

function poke(sid) {
  for (const wake of waiters.get(sid) ?? []) wake();
  waiters.set(sid, []);
}
async function until(sid, seen) {
  while (!seen()) await new Promise((wake) => waiters.set(sid, [...(waiters.get(sid) ?? []), wake]));
}
function take(sid) {
  const seen = updates.get(sid) ?? [];
  updates.set(sid, []);
  return seen;
}

const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const app = acp
  .client({ name: "fsm-core tests" })
  .onNotification("session/update", ({ params }) => {
    const list = updates.get(params.sessionId) ?? [];
    list.push(compact(params.update));
    updates.set(params.sessionId, list);
    poke(params.sessionId);
  })
  .onRequest("session/request_permission", ({ params, signal }) => {
    const sid = params.sessionId;
    asked.set(sid, [...(asked.get(sid) ?? []), params.toolCall.title]);
    const how = policy.get(sid) ?? "reject_once";
    if (how !== "hold") return { outcome: { outcome: "selected", optionId: how } };
    return new Promise((resolve) => {
      held.set(sid, resolve);
      // The agent withdraws the ask ($/cancel_request) when its turn is cancelled.
      signal.addEventListener("abort", () => {
        withdrawn.push(sid);
        resolve({ outcome: { outcome: "cancelled" } });
      });
      poke(sid);
    });
  });

// The error code and data.details a request is answered with (it must fail).
async function failure(call) {
  try {
    await call;
  } catch (error) {
    if (typeof error?.code === "number") return [error.code, error.data?.details ?? null];
    throw error;
  }
  throw new Error("the request succeeded");
}

async function code(call) {
  try {
    return await call;
  } catch (error) {
    if (typeof error?.code === "number") return error.code;
    throw error;
  }
}

const text = (t) => [{ type: "text", text: t }];
const seen = {};

async function mainSuite(ctx) {
  const hellos = [];
  for (const v of [1, 0, 7]) hellos.push(await ctx.request("initialize", { protocolVersion: v, clientCapabilities: {} }));
  seen.versions = hellos.map((h) => h.protocolVersion);
  seen.capabilities = hellos[0].agentCapabilities;
  seen.relative_cwd = await code(ctx.request("session/new", { cwd: "relative/dir", mcpServers: [] }));
  const session = async (i) => (await ctx.request("session/new", { cwd: dirs[i], mcpServers: [] })).sessionId;
  const prompt = (sid, blocks, options) => ctx.request("session/prompt", { sessionId: sid, prompt: blocks }, options);

  const a = await session(0);
  const answer = await prompt(a, text("hello"));
  seen.end_turn = { stop: answer.stopReason, updates: take(a) };

  const b = await session(1);
  await prompt(b, [...text("read"), { type: "resource_link", name: "a.py", uri: "file:///w/a.py" }]);
  seen.resource_link = take(b).at(-1)[1];
  seen.image = await code(prompt(b, [{ type: "image", data: "AAAA", mimeType: "image/png" }]));

  const c = await session(2);
  const stops = [];
  for (const t of ["first", "forbidden request", "refuse", "history"]) stops.push((await prompt(c, text(t))).stopReason);
  seen.refusal = { stops, last: take(c).at(-1)[1] };

  const d = await session(3);
  let pending = prompt(d, text("hold"));
  await until(d, () => (updates.get(d) ?? []).length > 0);
  await ctx.notify("session/cancel", { sessionId: d });
  const stop = (await pending).stopReason;
  await prompt(d, text("after"));
  seen.cancel = { stop, next: take(d).at(-1)[1] };

  const e = await session(4);
  const abort = new AbortController();
  pending = prompt(e, text("hold"), { cancellationSignal: abort.signal });
  await until(e, () => (updates.get(e) ?? []).length > 0);
  abort.abort();
  seen.cancel_request = (await pending).stopReason;

  const f = await session(5);
  const g = await session(6);
  pending = prompt(f, text("hold"));
  await until(f, () => (updates.get(f) ?? []).length > 0);
  await prompt(g, text("hi"));
  const other = take(g).at(-1)[1];
  await ctx.notify("session/cancel", { sessionId: f });
  seen.isolated = { other, held: (await pending).stopReason };

  seen.close = [
    await code(ctx.request("session/close", { sessionId: a })),
    await code(ctx.request("session/close", { sessionId: a })),
    await code(prompt(a, text("hi"))),
  ];
}

async function toolsSuite(ctx) {
  await ctx.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
  const session = async (i, how) => {
    const sid = (await ctx.request("session/new", { cwd: dirs[i], mcpServers: [] })).sessionId;
    policy.set(sid, how);
    return sid;
  };
  const prompt = (sid, blocks, options) => ctx.request("session/prompt", { sessionId: sid, prompt: blocks }, options);
  const callAdd = text('call add {"a": 1, "b": 2}');
  const callBoom = text("call boom {}");

  const t1 = await session(0, "allow_once");
  let answer = await prompt(t1, callAdd);
  seen.completed = { stop: answer.stopReason, updates: take(t1) };
  policy.set(t1, "allow_always");
  await prompt(t1, callBoom);
  seen.failed = take(t1);
  await prompt(t1, callBoom);
  take(t1);
  seen.asked = asked.get(t1);

  const t2 = await session(1, "reject_once");
  answer = await prompt(t2, callAdd);
  seen.rejected = { stop: answer.stopReason, updates: take(t2) };

  const t3 = await session(2, "hold");
  let pending = prompt(t3, callAdd);
  await until(t3, () => held.has(t3));
  await ctx.notify("session/cancel", { sessionId: t3 });
  held.get(t3)({ outcome: { outcome: "cancelled" } }); // the client's MUST on session/cancel
  seen.permission_cancel = { stop: (await pending).stopReason, updates: take(t3) };

  const t4 = await session(3, "hold");
  const abort = new AbortController();
  pending = prompt(t4, callAdd, { cancellationSignal: abort.signal });
  await until(t4, () => held.has(t4));
  abort.abort();
  seen.permission_cancel_request = { stop: (await pending).stopReason, updates: take(t4) };
  seen.withdrawn = withdrawn.includes(t4);

  // MCP: a stdio server given in session/new starts with the session, its tools are offered
  // to the model and called; one that cannot start refuses the session, naming it.
  const mcp = JSON.parse(process.env.ACP_MCP_SERVERS);
  const t5 = (await ctx.request("session/new", { cwd: dirs[4], mcpServers: [mcp.test] })).sessionId;
  policy.set(t5, "allow_once");
  await prompt(t5, text("tools"));
  const offered = take(t5).at(-1)[1];
  answer = await prompt(t5, text('call mcp__test__add {"a": 2, "b": 3}'));
  seen.mcp = { offered, stop: answer.stopReason, updates: take(t5), asked: asked.get(t5) };
  seen.mcp_missing = await failure(ctx.request("session/new", { cwd: dirs[5], mcpServers: [mcp.missing] }));
}

await app.connectWith(stream, suite === "main" ? mainSuite : toolsSuite);
child.stdin.end();
seen.exit = await exited;
process.stdout.write(JSON.stringify(seen) + "\n");
