#!/usr/bin/env node
// Replay fsm_core's conformance vectors (specs/vectors/*.jsonl, specs/vectors.schema.json) on
// the JavaScript interpreter in fsm.js. The contract every replayer keeps (SEMANTICS.md,
// "Checking a port"):
//
//   node ports/js/replay.js specs/vectors/tables.json < specs/vectors/agent.jsonl
//
// reads vectors on standard input and prints one verdict per input line, in order:
// {"id": ID, "verdict": "pass"} or {"id": ID, "verdict": "fail", "reason": WHY}.
// `fsm-core vectors --replay "node ports/js/replay.js"` runs it on every vector file.
"use strict";

const fs = require("fs");
const { Refusal, loadTables, misreads } = require("./fsm");

const FORMAT = "fsm-core/vectors";
const VERSION = 2; // 2: script entries say who made a call (`by`), faults, `unreached`

/** A difference between what the port did and what the vector expects. */
class Mismatch extends Error {}

/** An effect's `requires` failed as it was about to run: the whole step stops there, the
 * effect not performed (SEMANTICS.md, "Contracts and what a host owes"). */
class Fault extends Error {
  constructor(effect) {
    super(`the requires of ${effect} fails`);
    this.effect = effect;
  }
}

function same(a, b) {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]));
  }
  return value;
}

function expectSame(what, got, want) {
  if (!same(got, want)) {
    throw new Mismatch(`${what}: got ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
  }
}

/** A vector's sparse state (the values that differ from the initial state), as a store. */
function store(machine, sparse) {
  return { ...machine.initial(), ...sparse };
}

/** The values of `after` that differ from `before` (and, misreading `changes_written`, every
 * value in `written`). */
function changes(machine, before, after, written = new Set()) {
  const out = {};
  for (const n of machine.names) if (before[n] !== after[n] || written.has(n)) out[n] = after[n];
  return out;
}

/** `store`, recording in `written` the name of every variable set (misreading
 * `changes_written` only). */
function recording(store, written) {
  return new Proxy(store, {
    set(target, name, value) {
      written.add(name);
      target[name] = value;
      return true;
    },
  });
}

/** One fire vector: fire the call, running the script at the effects it names, and build the
 * call tree as the vector writes it. */
function fire(machine, vector) {
  const multi = "instances" in vector;
  const instances = {};
  const written = {}; // misreading `changes_written`: the variables each instance had set
  const fresh = (name, s) => {
    if (!misreads("changes_written")) return s;
    written[name] = new Set();
    return recording(s, written[name]);
  };
  if (multi) {
    for (const [name, sparse] of Object.entries(vector.instances)) {
      instances[name] = fresh(name, store(machine, sparse));
    }
  } else {
    instances[""] = fresh("", store(machine, vector.state));
  }
  const before = Object.fromEntries(Object.entries(instances).map(([k, v]) => [k, { ...v }]));
  const script = vector.script || [];
  script.forEach((entry, i) => {
    if (entry.by !== "listener" && entry.by !== "wiring") {
      throw new Mismatch(`script entry ${i}: \`by\` is ${JSON.stringify(entry.by)}`);
    }
    if (multi && !("create" in entry) && !("on" in entry)) {
      throw new Mismatch(`script entry ${i} of a tree's vector names no instance (\`on\`)`);
    }
  });
  const ran = new Set();
  let ordinal = 0;
  const used = new Set(); // misreading `ordinal_per_call`: indices of entries already run
  const atEnd = []; // misreading `observed_step_end`: [entry, store] to fill in at the end

  function call(on, event, args) {
    const s = instances[on];
    if (s === undefined) throw new Mismatch(`no instance ${on}`);
    const node = { row: null, effects: [] };
    const inside = [];
    const observed = [];
    const started = changes(machine, machine.initial(), s);
    let own = 0;
    try {
      const step = machine.fire(s, event, args, (name, values) => {
        const effect = machine.effects.get(name);
        const rendered = machine.renderEffect(name, values);
        const named = Object.fromEntries(effect.params.map((p, i) => [p.name, values[i]]));
        if (!machine.requires(name, s, named)) throw new Fault(rendered);
        const index = node.effects.length;
        node.effects.push(rendered);
        let seen = null;
        if (effect.notifies) {
          seen = { at: index, state: changes(machine, machine.initial(), s) };
          if (misreads("observed_row_start")) seen.state = started;
          if (misreads("observed_step_end")) atEnd.push([seen, s]);
          observed.push(seen);
        }
        const at = misreads("ordinal_per_call") ? own++ : ordinal++;
        script.forEach((entry, i) => {
          if (entry.at !== at || used.has(i)) return;
          if (misreads("ordinal_per_call")) used.add(i);
          ran.add(i);
          if ("create" in entry) {
            instances[entry.create] = fresh(entry.create, machine.initial());
            return;
          }
          if (entry.by === "listener" && !effect.notifies) {
            throw new Mismatch(`script entry ${i}: a listener inside ${rendered}, no notification`);
          }
          inside.push({ at: index, ...call(multi ? entry.on : on, entry.event, entry.args) });
        });
        if (seen !== null && misreads("observed_after_calls")) {
          seen.state = changes(machine, machine.initial(), s);
        }
      });
      node.row = step.row;
    } catch (e) {
      if (!(e instanceof Refusal)) throw e;
      return { refused: e.kind, message: e.message, observed: [] };
    }
    if (inside.length) node.inside = inside;
    node.observed = observed;
    return node;
  }

  const root = multi ? vector.call.on : "";
  const want = vector.expect;
  let got;
  try {
    got = call(root, vector.call.event, vector.call.args);
  } catch (e) {
    if (!(e instanceof Fault)) throw e;
    expectSame("fault", ["requires", e.effect], [want.fault, want.effect]);
    expectUnreached(script, ran, want);
    return;
  }
  for (const [seen, s] of atEnd) seen.state = changes(machine, machine.initial(), s);
  if ("fault" in want) throw new Mismatch(`no fault: expected the requires of ${want.effect} to fail`);
  expectUnreached(script, ran, want);
  if ("refused" in want) {
    expectSame("refusal", got.refused || null, want.refused);
    if ("message" in want) expectSame("message", got.message, want.message);
    expectSame("state after a refusal", instances, before);
    return;
  }
  if ("refused" in got) throw new Mismatch(`refused (${got.refused}): ${got.message}`);
  compareNode("call", got, want);
  const changed = {};
  for (const [name, s] of Object.entries(instances)) {
    // An instance the step created is a change even when it stays in the initial state.
    const diff = changes(machine, before[name] || machine.initial(), s, written[name]);
    if (Object.keys(diff).length || !(name in before)) changed[name] = diff;
  }
  expectSame("changes", multi ? changed : changed[""] || {}, want.changes);
}

/** The script entries the step never reached, by index, must be the ones the vector names. */
function expectUnreached(script, ran, want) {
  const unreached = script.map((_, i) => i).filter((i) => !ran.has(i));
  expectSame("unreached script entries", unreached, want.unreached || []);
}

/** Compare a call node: its row (or refusal), effects, the calls inside and, when the vector
 * records them, the states its notifications showed. */
function compareNode(where, got, want) {
  if ("refused" in want || "refused" in got) {
    expectSame(`${where}: refusal`, [got.refused, got.message], [want.refused, want.message]);
    return;
  }
  expectSame(`${where}: row`, got.row, want.row);
  expectSame(`${where}: effects`, got.effects, want.effects);
  if ("observed" in want) expectSame(`${where}: observed states`, got.observed, want.observed);
  const inner = got.inside || [];
  const wanted = want.inside || [];
  expectSame(`${where}: calls inside`, inner.map((c) => c.at), wanted.map((c) => c.at));
  wanted.forEach((w, i) => compareNode(`${where} > inside ${want.effects[w.at]}`, inner[i], w));
}

function holds(machine, vector) {
  const { what, name } = vector.predicate;
  const s = store(machine, vector.state);
  let value;
  if (what === "requires") value = machine.requires(name, s, vector.args);
  else if (what === "invariant") value = Boolean(machine.evaluate(machine.invariants.get(name), s, {}));
  else if (what === "step_invariant") value = machine.stable(name, s, store(machine, vector.after));
  else if (what === "definition") value = Boolean(machine.evaluate({ def: name }, s, {}));
  else throw new Mismatch(`unknown predicate ${what}`);
  expectSame("holds", value, vector.expect.holds);
}

function verdict(machines, line) {
  let vector;
  try {
    vector = JSON.parse(line);
  } catch (e) {
    return { id: null, verdict: "fail", reason: `not JSON: ${e.message}` };
  }
  const id = vector.id;
  try {
    if (vector.kind === "header") {
      if (vector.format !== FORMAT || vector.version !== VERSION) {
        throw new Mismatch(`expected ${FORMAT} version ${VERSION}`);
      }
      if (!(vector.machine in machines)) {
        throw new Mismatch(`the header names machine ${vector.machine}, which ${tablesPath} lacks`);
      }
    } else {
      if (current === null) throw new Mismatch("no header line names the machine");
      const machine = machines[current];
      if (machine === undefined) {
        throw new Mismatch(`the header names machine ${current}, which ${tablesPath} lacks`);
      }
      if (vector.kind === "fire") fire(machine, vector);
      else if (vector.kind === "holds") holds(machine, vector);
      else throw new Mismatch(`unknown kind ${vector.kind}`);
    }
    return { id, verdict: "pass" };
  } catch (e) {
    if (!(e instanceof Mismatch)) return { id, verdict: "fail", reason: `crashed: ${e.stack}` };
    return { id, verdict: "fail", reason: e.message };
  }
}

let current = null;
let tablesPath = null;

/** The verdict of each line of a vector file, in order; with `untilFail`, only up to the first
 * that fails. */
function replayLines(machines, lines, untilFail = false) {
  current = null;
  const out = [];
  for (const line of lines) {
    if (untilFail && out.length && out[out.length - 1].verdict !== "pass") break;
    try {
      const head = JSON.parse(line);
      if (head.kind === "header") current = head.machine;
    } catch (e) {
      // reported by verdict()
    }
    out.push(verdict(machines, line));
  }
  return out;
}

function main() {
  if (process.argv.length !== 3) {
    process.stderr.write("usage: replay.js TABLES.json < VECTORS.jsonl\n");
    process.exit(2);
  }
  tablesPath = process.argv[2];
  const machines = loadTables(JSON.parse(fs.readFileSync(tablesPath, "utf8")));
  const lines = fs.readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0);
  const out = replayLines(machines, lines).map((v) => JSON.stringify(v));
  process.stdout.write(out.length ? out.join("\n") + "\n" : "");
}

if (require.main === module) main();

module.exports = { replayLines };
