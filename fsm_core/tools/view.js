// The script of `fsm-core view` (fsm_core/tools/_view.py inlines it). Everything it shows
// comes from the JSON data block and is shown as text: it never builds markup from strings.
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("fsm-data").textContent);
  const MACHINES = new Map(DATA.machines.map((m) => [m.name, m]));
  const SVG_NS = "http://www.w3.org/2000/svg";

  // --- small helpers -------------------------------------------------------------------------

  /** An element with `attrs` (attribute name -> value) and children (nodes or text). */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function isObject(v) {
    return v !== null && typeof v === "object" && !Array.isArray(v);
  }

  /** An ITF variant (`{"tag": ..., "value": ...}`), as the checker writes a tree slot. */
  function isVariant(v) {
    return isObject(v) && Object.keys(v).length === 2 && "tag" in v && "value" in v;
  }

  /** An ITF record: an object whose keys are field names (none starts with #). */
  function isRecord(v) {
    return isObject(v) && !isVariant(v) && Object.keys(v).every((k) => !k.startsWith("#"));
  }

  /** An ITF value as the page shows it. */
  function show(v) {
    if (v === null) return "null";
    if (typeof v !== "object") return String(v);
    if (Array.isArray(v)) return "[" + v.map(show).join(", ") + "]";
    if ("#bigint" in v) return String(v["#bigint"]);
    if ("#tup" in v) return "(" + v["#tup"].map(show).join(", ") + ")";
    if ("#set" in v) return "{" + v["#set"].map(show).join(", ") + "}";
    if ("#map" in v) return "{" + v["#map"].map((p) => show(p[0]) + ": " + show(p[1])).join(", ") + "}";
    if ("#unserializable" in v) return String(v["#unserializable"]);
    if (isVariant(v)) return v.tag === "None" ? "absent" : v.tag + "(" + show(v.value) + ")";
    return "{" + Object.entries(v).map((p) => p[0] + "=" + show(p[1])).join(", ") + "}";
  }

  /** A state's variables, one entry per field: `a.1.stage`, `budget.admit`; an absent
   * slot is `a.1: absent`. */
  function flatten(state) {
    const out = new Map();
    for (const [name, v] of Object.entries(state)) {
      if (name === "#meta") continue;
      let inner = v;
      if (isVariant(v)) {
        if (v.tag === "None") {
          out.set(name, "absent");
          continue;
        }
        inner = v.value;
      }
      if (isRecord(inner)) {
        for (const [k, x] of Object.entries(inner)) out.set(name + "." + k, show(x));
      } else {
        out.set(name, show(v));
      }
    }
    return out;
  }

  /** Where each instance is: `{instance, machine, state}` for every variable holding a
   * machine's state (a record with its state variable, or the state variable itself). */
  function instancesOf(state) {
    const out = [];
    for (const [name, v] of Object.entries(state)) {
      if (name === "#meta") continue;
      const inner = isVariant(v) ? (v.tag === "None" ? null : v.value) : v;
      for (const m of DATA.machines) {
        const names = m.states.map((s) => s.name);
        if (isRecord(inner) && names.includes(inner[m.state_var])) {
          out.push({ instance: name, machine: m.name, state: inner[m.state_var] });
        } else if (name === m.state_var && names.includes(inner)) {
          out.push({ instance: "", machine: m.name, state: inner });
        }
      }
    }
    return out;
  }

  // --- the machines --------------------------------------------------------------------------

  /** Parse the SVG `dot` drew and keep only drawing: no script, no event attribute. */
  function importSvg(text) {
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const root = doc.documentElement;
    if (root.namespaceURI !== SVG_NS || doc.getElementsByTagName("parsererror").length) return null;
    for (const bad of root.querySelectorAll("script, foreignObject, iframe, object, embed, use")) {
      bad.remove();
    }
    for (const node of [root, ...root.querySelectorAll("*")]) {
      for (const a of [...node.attributes]) {
        const href = /href$/i.test(a.name) && !/^#/.test(a.value);
        if (/^on/i.test(a.name) || href) node.removeAttribute(a.name);
      }
    }
    return document.importNode(root, true);
  }

  /** Draw one point of the diagram as one pixel (dot's SVG says pt: a third larger). */
  function fit(svg) {
    const box = svg.viewBox && svg.viewBox.baseVal;
    if (box && box.width) {
      svg.setAttribute("width", String(Math.round(box.width)));
      svg.setAttribute("height", String(Math.round(box.height)));
    }
  }

  function rowsOf(machine, predicate) {
    return machine.rows.filter(predicate);
  }

  function drawMachine(m) {
    const box = el("div", { class: "machine", "data-machine": m.name });
    box.append(el("h2", {}, m.name + ": " + m.title), el("p", { class: "hint" }, m.file));
    const bar = el("div", { class: "statebar" });
    for (const s of m.states) {
      const b = el("button", { type: "button", class: "state", "data-machine": m.name, "data-state": s.name, title: s.doc }, s.name);
      b.addEventListener("click", () => showState(m.name, s.name));
      bar.append(b);
    }
    box.append(bar);
    const svg = m.svg ? importSvg(m.svg) : null;
    if (svg) {
      fit(svg);
      for (const node of svg.querySelectorAll("[id]")) {
        const id = node.getAttribute("id");
        node.setAttribute("id", m.name + "/" + id);
        if (node.classList.contains("node") && id.startsWith("state:")) {
          node.dataset.machine = m.name;
          node.dataset.state = id.slice("state:".length);
          node.addEventListener("click", () => showState(m.name, node.dataset.state));
        } else if (node.classList.contains("edge") && id.startsWith("event:")) {
          const [, source, event, target] = id.split(":");
          node.dataset.machine = m.name;
          node.dataset.event = event;
          node.addEventListener("click", () => showEdge(m.name, source, event, target));
        }
      }
      box.append(el("div", { class: "diagram" }, svg));
    } else {
      box.append(el("p", { class: "hint" }, "No overview drawn (Graphviz dot was not on PATH when the page was written)."));
    }
    const list = el("table", {});
    for (const r of m.rows) {
      const link = el("button", { type: "button", class: "row-link", "data-machine": m.name, "data-row": r.id }, r.id);
      link.addEventListener("click", () => showRow(m.name, r.id));
      const to = r.reject !== null ? "✗ " + r.reject : r.target === null ? "stays" : "→ " + r.target;
      list.append(el("tr", {}, el("td", {}, link), el("td", { class: "code" }, r.event), el("td", {}, r.sources.join(", ") + " " + to)));
    }
    box.append(el("details", { class: "rows" }, el("summary", {}, m.rows.length + " rows"), list));
    return box;
  }

  function drawWiring(w) {
    const box = el("div", { class: "machine", "data-machine": "wiring" });
    box.append(el("h2", {}, "wiring: how one instance's effect reaches another"), el("p", { class: "hint" }, w.file));
    const svg = w.svg ? importSvg(w.svg) : null;
    if (svg) {
      fit(svg);
      for (const node of svg.querySelectorAll("[id]")) node.setAttribute("id", "wiring/" + node.getAttribute("id"));
      for (const edge of svg.querySelectorAll("g.edge")) {
        edge.addEventListener("click", () => {
          const a = edge.querySelector("a");
          const tip = a ? a.getAttributeNS("http://www.w3.org/1999/xlink", "title") || "" : "";
          const details = clear(document.getElementById("details"));
          details.append(el("h2", {}, "wiring"));
          for (const line of tip.split("\n")) details.append(el("p", { class: "code" }, line));
        });
      }
      box.append(el("div", { class: "diagram" }, svg));
    }
    return box;
  }

  // --- details -------------------------------------------------------------------------------

  function rowBlock(m, r) {
    const head = r.event + (r.params.length ? "(" + r.params.join(", ") + ")" : "");
    const to = r.reject !== null ? "refused: " + r.reject : r.target === null ? "stays" : "→ " + r.target;
    const block = el("div", { class: "row" + (r.reject !== null ? " reject" : ""), "data-machine": m.name, "data-row": r.id });
    block.append(
      el("div", {}, el("strong", { class: "code" }, r.id), " ", el("span", { class: "code" }, head), " — from " + r.sources.join(", ") + " " + to),
      el("div", { class: "guard" }, "guard: ", el("code", {}, r.guard === null ? "(none: always)" : r.guard)),
    );
    const effects = el("ul", { class: "effects" });
    for (const e of r.effects) effects.append(el("li", {}, el("code", {}, e)));
    block.append(el("div", {}, r.effects.length ? "effects, in order:" : "effects: none"), effects);
    if (r.doc) block.append(el("p", { class: "doc" }, r.doc));
    for (const cid of r.clauses) {
      const c = DATA.clauses[cid];
      const clause = el("div", { class: "clause", "data-clause": cid }, el("strong", { class: "code" }, cid));
      if (c) {
        clause.append(" (" + c.source + "): " + c.summary, el("blockquote", {}, c.quote));
      }
      block.append(clause);
    }
    return block;
  }

  function select(machine, state, event) {
    for (const n of document.querySelectorAll(".selected")) n.classList.remove("selected");
    const scope = '[data-machine="' + CSS.escape(machine) + '"]';
    if (state !== null) {
      for (const n of document.querySelectorAll("g.node" + scope + '[data-state="' + CSS.escape(state) + '"]')) n.classList.add("selected");
    }
    if (event !== null) {
      for (const n of document.querySelectorAll("g.edge" + scope + '[data-event="' + CSS.escape(event) + '"]')) n.classList.add("selected");
    }
  }

  function showState(machine, state) {
    const m = MACHINES.get(machine);
    const s = m.states.find((x) => x.name === state);
    const details = clear(document.getElementById("details"));
    details.dataset.machine = machine;
    details.dataset.state = state;
    details.append(el("h2", {}, machine + " · state " + state));
    if (s && s.doc) details.append(el("p", { class: "doc" }, s.doc));
    const rows = rowsOf(m, (r) => r.sources.includes(state));
    details.append(el("p", { class: "hint" }, rows.length + " rows take an event in this state:"));
    for (const r of rows) details.append(rowBlock(m, r));
    select(machine, state, null);
  }

  function showEdge(machine, source, event, target) {
    const m = MACHINES.get(machine);
    const details = clear(document.getElementById("details"));
    details.dataset.machine = machine;
    details.dataset.state = source;
    details.append(el("h2", {}, machine + " · " + event + ": " + source + " → " + target));
    for (const r of rowsOf(m, (x) => x.event === event && x.target === target && x.sources.includes(source))) {
      details.append(rowBlock(m, r));
    }
    select(machine, null, event);
  }

  function showRow(machine, id) {
    const m = MACHINES.get(machine);
    const r = m && m.rows.find((x) => x.id === id);
    const details = clear(document.getElementById("details"));
    details.dataset.machine = machine;
    delete details.dataset.state;
    if (!r) {
      details.append(el("p", { class: "error" }, "no row " + id + " in " + machine));
      return;
    }
    details.append(el("h2", {}, machine + " · row " + id), rowBlock(m, r));
    select(machine, null, r.event);
  }

  // --- traces --------------------------------------------------------------------------------

  const traces = [];
  let current = null; // {name, itf, index}

  function addTrace(name, itf) {
    if (!isObject(itf) || !Array.isArray(itf.states) || !itf.states.every(isObject) || !itf.states.length) {
      throw new Error(name + ": not an ITF trace (it needs a non-empty list of states under \"states\")");
    }
    traces.push({ name: name, itf: itf });
    const option = el("option", { value: String(traces.length - 1) }, name);
    document.getElementById("trace-select").append(option);
    return traces.length - 1;
  }

  function openTrace(i) {
    document.getElementById("trace-select").value = String(i);
    current = { name: traces[i].name, itf: traces[i].itf, index: 0 };
    const meta = isObject(traces[i].itf["#meta"]) ? traces[i].itf["#meta"] : {};
    document.getElementById("trace-meta").textContent = meta.description ? String(meta.description) : traces[i].name;
    step(0);
  }

  /** The machine of the instance named `instance` in `state` (null when none holds a state). */
  function machineOf(instances, instance) {
    const found = instances.find((x) => x.instance === instance);
    return found ? found.machine : null;
  }

  function callItem(call, instances) {
    const item = el("li", { class: "call" });
    if (call.effect) item.append(el("span", { class: "code" }, "inside " + call.effect + ": "));
    item.append(el("span", { class: "code action" }, String(call.action || call.event || "?")));
    if (typeof call.row === "string") {
      const machine = machineOf(instances, typeof call.instance === "string" ? call.instance : "");
      const link = el("button", { type: "button", class: "row-link", "data-row": call.row }, call.row);
      if (machine) link.addEventListener("click", () => showRow(machine, call.row));
      item.append(" → ", link);
    } else if ("row" in call) {
      item.append(" → ignored here");
    }
    if (call.stopped) item.append(el("span", { class: "error" }, " (stopped at " + call.stopped + ")"));
    if (Array.isArray(call.inside) && call.inside.length) {
      const inner = el("ul", { class: "inside" });
      for (const c of call.inside) if (isObject(c)) inner.append(callItem(c, instances));
      item.append(inner);
    }
    return item;
  }

  function step(index) {
    if (current === null) return;
    const states = current.itf.states;
    current.index = Math.max(0, Math.min(states.length - 1, index));
    const state = states[current.index];
    const meta = isObject(state["#meta"]) ? state["#meta"] : {};
    document.getElementById("step-label").textContent = "step " + current.index + " / " + (states.length - 1);
    document.getElementById("step-label").dataset.index = String(current.index);

    const instances = instancesOf(state);
    const stepping = typeof meta.instance === "string" ? meta.instance : "";
    const box = clear(document.getElementById("step"));
    if (current.index === 0) {
      box.append(el("p", {}, "the initial state"));
    } else {
      box.append(el("ul", { class: "calls" }, callItem(meta, instances)));
    }

    const before = current.index > 0 ? flatten(states[current.index - 1]) : null;
    const after = flatten(state);
    const changed = clear(document.getElementById("changed"));
    const vars = clear(document.getElementById("vars"));
    const names = [...after.keys(), ...(before ? [...before.keys()].filter((k) => !after.has(k)) : [])];
    for (const name of names) {
      const was = before ? (before.has(name) ? before.get(name) : "—") : null;
      const now = after.has(name) ? after.get(name) : "—";
      const differs = was !== null && was !== now;
      if (differs) changed.append(el("li", { "data-var": name }, name + ": " + was + " → " + now));
      vars.append(el("tr", differs ? { class: "changed" } : {}, el("td", { class: "code" }, name), el("td", { class: "code" }, now)));
    }
    if (!changed.firstChild) changed.append(el("li", { class: "hint" }, current.index === 0 ? "(the initial state)" : "(nothing)"));

    for (const n of document.querySelectorAll(".occupied, .active")) n.classList.remove("occupied", "active");
    const where = clear(document.getElementById("instances"));
    for (const x of instances) {
      const active = current.index > 0 && x.instance === stepping;
      where.append(el("li", { class: active ? "active" : "", "data-instance": x.instance, "data-machine": x.machine, "data-state": x.state }, (x.instance || "(the model)") + ": " + x.machine + " " + x.state));
      const scope = '[data-machine="' + CSS.escape(x.machine) + '"][data-state="' + CSS.escape(x.state) + '"]';
      for (const n of document.querySelectorAll("g.node" + scope + ", button.state" + scope)) {
        n.classList.add(active ? "active" : "occupied");
      }
    }
  }

  function readFile(file) {
    const reader = new FileReader();
    reader.onload = () => {
      const error = document.getElementById("trace-error");
      try {
        openTrace(addTrace(file.name, JSON.parse(String(reader.result))));
        error.textContent = "";
      } catch (e) {
        error.textContent = e instanceof SyntaxError ? file.name + ": not JSON (" + e.message + ")" : e.message;
      }
    };
    reader.readAsText(file);
  }

  // --- wiring it up --------------------------------------------------------------------------

  const machines = document.getElementById("machines");
  for (const m of DATA.machines) machines.append(drawMachine(m));
  if (DATA.wiring) machines.append(drawWiring(DATA.wiring));

  for (const t of DATA.traces) addTrace(t.name, t.itf);
  if (traces.length) openTrace(0);
  document.getElementById("trace-select").addEventListener("change", (e) => openTrace(Number(e.target.value)));
  document.getElementById("trace-file").addEventListener("change", (e) => {
    if (e.target.files.length) readFile(e.target.files[0]);
  });
  document.getElementById("prev").addEventListener("click", () => current && step(current.index - 1));
  document.getElementById("next").addEventListener("click", () => current && step(current.index + 1));
  document.addEventListener("keydown", (e) => {
    if (current === null || e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) return;
    if (e.key === "ArrowRight" || e.key === "j") step(current.index + 1);
    else if (e.key === "ArrowLeft" || e.key === "k") step(current.index - 1);
    else return;
    e.preventDefault();
  });
  document.body.dataset.ready = "true";
})();
