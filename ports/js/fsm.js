// An interpreter of fsm_core's exported tables (`fsm-core spec --json`, specs/schema.json),
// written from specs/SEMANTICS.md alone: plain Node.js, no dependencies. It is the proof that
// a port can be written from the artifacts, and a starting point to copy.
//
//   const { loadTables } = require("./fsm");
//   const agent = loadTables(JSON.parse(text)).agent;
//   const store = agent.initial();            // { phase: "idle", holder: "none", ... }
//   const step = agent.fire(store, "send", { wake: true, lane: "next_turn" }, (name, args) => {
//     console.log(agent.renderEffect(name, args));  // enqueue(next_turn), schedule_driver()
//   });
//   step.row;                                  // "send.idle.wake"
//
// `fire` changes `store` in place as the row runs, so a `perform` callback that fires again
// (a listener re-entering inside a notification) sees the state the table says it sees.
"use strict";

const FORMAT = "fsm-core/spec";
const VERSION = 4; // 3: the wiring (`doc.wiring`); 4: its listeners. This port ignores both

// --- deliberate misreadings (test-only) -------------------------------------------------------
//
// Each entry is a plausible way to misread one rule of SEMANTICS.md. With FSM_MISREAD=<name> in
// the environment (or `setMisread(name)`), the port misreads that one rule, so that
// `node ports/js/misread.js` can count the vectors that catch it. Never set it otherwise; a
// port copied from this one drops every `misread === ...` branch.
const MISREADINGS = {
  observed_row_start: "`observed` records the state the call started from, before its row ran",
  observed_step_end: "`observed` records the state the whole step ended in",
  observed_after_calls: "`observed` records the state after the calls made inside the effect",
  args_at_row_start: "effect arguments are evaluated as the row starts, not as the effect is reached",
  when_at_row_start: "a `when` is evaluated as the row starts, not as it is reached",
  when_retested: "a `when` is re-tested before each statement of its body",
  to_after_do: "the state variable moves to `to` after `do` ran, not before",
  true_as_int: "`true` and `false` are accepted as the integers 1 and 0",
  args_checked_late: "a call's arguments are checked only once a row will run",
  unmatched_ignored: "an event whose rows are all disabled is ignored, not refused",
  ordinal_per_call: "a script's ordinal counts the effects of each call apart, not the step's",
  changes_written: "`changes` lists every variable the step wrote, unchanged ones included",
};
let misread = "";

/** Switch on the misreading `name` (`""`: none); throws on a name it does not know. */
function setMisread(name) {
  if (name !== "" && !(name in MISREADINGS)) throw new Error(`no misreading ${name}`);
  misread = name;
}

setMisread(process.env.FSM_MISREAD || "");

/** True iff the misreading `name` is switched on. */
function misreads(name) {
  return misread === name;
}

/** A refusal: `kind` is "rejected", "not-enabled" or "bad-call" (SEMANTICS.md, "Refusals"). */
class Refusal extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

/** A value as the tables write it: true, false, 3, -2, idle. */
function show(value) {
  return typeof value === "boolean" ? (value ? "true" : "false") : String(value);
}

class Machine {
  constructor(doc) {
    this.name = doc.name;
    this.stateVar = doc.state_var;
    this.names = [doc.state_var, ...doc.variables.map((v) => v.name)];
    this.init = { [doc.state_var]: doc.initial };
    for (const v of doc.variables) this.init[v.name] = v.init;
    this.domains = { [doc.state_var]: doc.states.map((s) => s.name) };
    for (const v of doc.variables) this.domains[v.name] = v.domain;
    this.events = new Map(doc.events.map((e) => [e.name, e]));
    this.effects = new Map(doc.effects.map((e) => [e.name, e]));
    this.defs = new Map(doc.definitions.map((d) => [d.name, d.expr]));
    this.rows = doc.rows;
    this.pairs = new Map();
    for (const [kind, rules] of [["ignored", doc.ignored], ["rejected", doc.rejected]]) {
      for (const rule of rules) {
        for (const state of rule.in) {
          for (const event of rule.on) this.pairs.set(`${state} ${event}`, { kind, why: rule.why });
        }
      }
    }
    this.invariants = new Map(doc.invariants.map((i) => [i.id, i.holds.expr]));
    this.stepInvariants = new Map(doc.step_invariants.map((s) => [s.id, s]));
  }

  /** The initial state, as a fresh store. */
  initial() {
    return { ...this.init };
  }

  // --- expressions -------------------------------------------------------------------------

  /** Evaluate an `expr` tree on a store, with `params` naming the event's (or effect's)
   * arguments. Integers are exact: every value the tables can compute is within 2^53. */
  evaluate(e, store, params) {
    if ("lit" in e) return e.lit;
    if ("sym" in e) return e.sym;
    if ("var" in e) return store[e.var];
    if ("param" in e) return params[e.param];
    if ("def" in e) return this.evaluate(this.defs.get(e.def), store, {});
    if ("not" in e) return !this.evaluate(e.not, store, params);
    if ("in" in e) return e.set.includes(this.evaluate(e.in, store, params));
    if ("if" in e) {
      return this.evaluate(e.if, store, params)
        ? this.evaluate(e.then, store, params)
        : this.evaluate(e.else, store, params);
    }
    const [left, right] = e.args;
    const l = () => this.evaluate(left, store, params);
    const r = () => this.evaluate(right, store, params);
    switch (e.op) {
      case "and": return l() && r();
      case "or": return l() || r();
      case "implies": return !l() || r();
      case "==": return l() === r();
      case "!=": return l() !== r();
      case "<": return l() < r();
      case "<=": return l() <= r();
      case ">": return l() > r();
      case ">=": return l() >= r();
      case "+": return l() + r();
      case "-": return l() - r();
      default: throw new Error(`${this.name}: unknown operator ${e.op}`);
    }
  }

  // --- firing ------------------------------------------------------------------------------

  /** Refuse a call the event does not admit (kind "bad-call"), before anything runs. */
  checkArguments(event, args) {
    const spec = this.events.get(event);
    if (spec === undefined) throw new Refusal("bad-call", `${this.name} has no event ${event}`);
    const names = spec.params.map((p) => p.name);
    const given = Object.keys(args);
    if (given.length !== names.length || !names.every((n) => given.includes(n))) {
      throw new Refusal(
        "bad-call",
        `${this.name}.${event} takes (${names.join(", ")}), got (${given.join(", ")})`,
      );
    }
    for (const p of spec.params) {
      const value = args[p.name];
      const kind = typeof p.domain[0];
      let typed = kind === "number" ? Number.isInteger(value) : typeof value === kind;
      let v = value;
      if (misread === "true_as_int" && kind === "number" && typeof value === "boolean") {
        typed = true;
        v = Number(value);
      }
      if (!typed || !p.domain.includes(v)) {
        throw new Refusal(
          "bad-call",
          `${this.name}.${event}: ${p.name}=${JSON.stringify(value)} is not a value of ${p.type}`,
        );
      }
    }
  }

  /** The row that handles `event(args)` in `store`, null when the table ignores it there;
   * throws a Refusal ("rejected" or "not-enabled") otherwise. Pure. */
  select(store, event, args) {
    const late = misread === "args_checked_late";
    if (!late) this.checkArguments(event, args);
    else if (!this.events.has(event)) throw new Refusal("bad-call", `${this.name} has no event ${event}`);
    const state = store[this.stateVar];
    let handled = false;
    for (const row of this.rows) {
      if (row.on !== event || !row.from.includes(state)) continue;
      handled = true;
      if (this.evaluate(row.guard.expr, store, args)) {
        if (row.reject !== null) throw new Refusal("rejected", row.reject);
        if (late) this.checkArguments(event, args);
        return row;
      }
    }
    const pair = this.pairs.get(`${state} ${event}`);
    if (!handled && pair !== undefined) {
      if (pair.kind === "ignored") return null;
      throw new Refusal("rejected", pair.why);
    }
    if (late) this.checkArguments(event, args);
    if (misread === "unmatched_ignored") return null;
    throw new Refusal(
      "not-enabled",
      `${this.name}: no row of ${event}(${this.renderArguments(event, args)}) is enabled in ` +
        this.renderState(store),
    );
  }

  /** Fire `event(args)` on `store`, in place: the state variable moves to the row's `to`, then
   * its `do` runs in order; `perform(name, args)` is called as each effect is reached. Returns
   * `{ row }` (row null when ignored); throws a Refusal, with `store` unchanged. */
  fire(store, event, args, perform = () => {}) {
    const row = this.select(store, event, args);
    if (row === null) return { row: null };
    const late = misread === "to_after_do";
    if (row.to !== null && !late) store[this.stateVar] = row.to;
    const start = misread.endsWith("_at_row_start") ? { ...store } : store;
    this.run(row.do, store, args, perform, start);
    if (row.to !== null && late) store[this.stateVar] = row.to;
    return { row: row.id };
  }

  /** Run `statements` on `store`; `start` is the store as the row started (the same object,
   * unless a misreading evaluates something there). */
  run(statements, store, args, perform, start = store) {
    for (const s of statements) {
      if ("assign" in s) {
        store[s.assign] = this.evaluate(s.value.expr, store, args);
      } else if ("call" in s) {
        const at = misread === "args_at_row_start" ? start : store;
        perform(s.call, s.args.map((a) => this.evaluate(a.expr, at, args)));
      } else if (misread === "when_retested") {
        for (const inner of s.do) {
          if (!this.evaluate(s.when.expr, store, args)) break;
          this.run([inner], store, args, perform, start);
        }
      } else if (this.evaluate(s.when.expr, misread === "when_at_row_start" ? start : store, args)) {
        this.run(s.do, store, args, perform, start);
      }
    }
  }

  // --- predicates --------------------------------------------------------------------------

  /** True iff `effect`'s `requires` holds on `store` with its arguments `args` (by name). */
  requires(effect, store, args) {
    const contract = this.effects.get(effect).requires;
    return contract === null || Boolean(this.evaluate(contract.expr, store, args));
  }

  /** True iff the step invariant `id` holds between two observed states. */
  stable(id, before, after) {
    const s = this.stepInvariants.get(id);
    const changed = before[s.unchanged] !== after[s.unchanged];
    const held = (store) => this.evaluate(s.while.expr, store, {});
    return !(changed && held(before) && held(after));
  }

  // --- rendering ---------------------------------------------------------------------------

  renderEffect(name, args) {
    return `${name}(${args.map(show).join(", ")})`;
  }

  renderArguments(event, args) {
    const spec = this.events.get(event);
    return spec.params.map((p) => `${p.name}=${show(args[p.name])}`).join(", ");
  }

  renderState(store) {
    const vars = this.names.slice(1).map((n) => `${n}=${show(store[n])}`);
    return `${store[this.stateVar]}{${vars.join(", ")}}`;
  }
}

/**
 * Every machine of an export, by name; refuses a format or version it does not know. The
 * export's `wiring` (how instances meet: SEMANTICS.md, "How instances meet") is not read: a
 * vector's script already says which call each wired effect makes, on which instance.
 */
function loadTables(doc) {
  if (doc.format !== FORMAT || doc.version !== VERSION) {
    throw new Error(`expected ${FORMAT} version ${VERSION}, got ${doc.format} ${doc.version}`);
  }
  const machines = {};
  for (const [name, m] of Object.entries(doc.machines)) machines[name] = new Machine(m);
  return machines;
}

module.exports = { MISREADINGS, Machine, Refusal, loadTables, misreads, setMisread, show };
