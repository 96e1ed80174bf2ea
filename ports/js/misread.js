#!/usr/bin/env node
// How hard the conformance vectors pin each rule of SEMANTICS.md, measured as a port author
// would: switch on one deliberate misreading of the port in fsm.js (`MISREADINGS`), replay the
// vectors, count the vectors that fail. A rule the kit pins well fails by the hundreds.
//
//   node ports/js/misread.js                       # every misreading, every file of specs/vectors
//   node ports/js/misread.js --rule true_as_int window.jsonl
//   node ports/js/misread.js --first               # stop each misreading at its first failure
//   node ports/js/misread.js --markdown            # the table specs/README.md keeps
//
// Arguments: vector files (a bare name is looked up in the directory), or a directory holding
// them and `tables.json` (default: specs/vectors). The unmodified port is replayed first and must
// pass every vector. The last line reads `Done. misreadings=N caught=N missed=0`; the exit status
// is 1 when some misreading fails no vector (the kit misses it), 2 when the unmodified port fails.
"use strict";

const fs = require("fs");
const path = require("path");
const { MISREADINGS, loadTables, setMisread } = require("./fsm");
const { replayLines } = require("./replay");

function usage(message) {
  process.stderr.write(`misread.js: ${message}\n`);
  process.stderr.write("usage: misread.js [--rule NAME]... [--first] [--markdown] [DIR | FILE...]\n");
  process.exit(2);
}

function parse(argv) {
  const options = { rules: [], first: false, markdown: false, dir: null, files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--rule") {
      const name = argv[++i];
      if (!(name in MISREADINGS)) usage(`no misreading ${name}; there are ${Object.keys(MISREADINGS).join(", ")}`);
      options.rules.push(name);
    } else if (a === "--first") options.first = true;
    else if (a === "--markdown") options.markdown = true;
    else if (a.startsWith("--")) usage(`unknown option ${a}`);
    else if (fs.existsSync(a) && fs.statSync(a).isDirectory()) options.dir = a;
    else options.files.push(a);
  }
  options.dir = options.dir || path.join(__dirname, "..", "..", "specs", "vectors");
  if (!options.rules.length) options.rules = Object.keys(MISREADINGS);
  if (!options.files.length) {
    options.files = fs.readdirSync(options.dir).filter((f) => f.endsWith(".jsonl")).sort();
  }
  options.files = options.files.map((f) => (fs.existsSync(f) ? f : path.join(options.dir, f)));
  return options;
}

/** The lines of a vector file that fail, as [line number, id], at most one if `first`. */
function failing(machines, lines, first) {
  const out = [];
  replayLines(machines, lines, first).forEach((v, i) => {
    if (v.verdict !== "pass" && !(first && out.length)) out.push([i + 1, v.id, v.reason]);
  });
  return out;
}

function main() {
  const o = parse(process.argv.slice(2));
  const machines = loadTables(JSON.parse(fs.readFileSync(path.join(o.dir, "tables.json"), "utf8")));
  const files = o.files.map((f) => ({
    name: path.basename(f),
    lines: fs.readFileSync(f, "utf8").split("\n").filter((l) => l.length > 0),
  }));
  setMisread("");
  for (const f of files) {
    const bad = failing(machines, f.lines, true);
    if (bad.length) {
      process.stdout.write(`the unmodified port fails ${f.name}:${bad[0][0]}: ${bad[0][2]}\n`);
      process.exit(2);
    }
  }
  const counts = {};
  let missed = 0;
  for (const rule of o.rules) {
    setMisread(rule);
    counts[rule] = {};
    let caught = null;
    for (const f of files) {
      if (o.first && caught !== null) break;
      const bad = failing(machines, f.lines, o.first);
      counts[rule][f.name] = bad.length;
      if (bad.length && caught === null) caught = `${f.name}:${bad[0][0]} ${bad[0][1]}`;
    }
    setMisread("");
    if (caught === null) missed++;
    if (o.first) {
      process.stdout.write(`${rule}: ${caught === null ? "MISSED: no vector fails" : `caught by ${caught}`}\n`);
    }
  }
  if (!o.first) write(o, files, counts);
  const n = o.rules.length;
  process.stdout.write(`Done. misreadings=${n} caught=${n - missed} missed=${missed}\n`);
  process.exit(missed ? 1 : 0);
}

/** The failing vectors per misreading and file, as a plain or a Markdown table. */
function write(o, files, counts) {
  const names = files.map((f) => f.name);
  const total = (rule) => names.reduce((sum, n) => sum + counts[rule][n], 0);
  if (o.markdown) {
    const head = ["misreading", ...names.map((n) => `\`${n}\``), "total"];
    process.stdout.write(`| ${head.join(" | ")} |\n|${head.map(() => " --- ").join("|")}|\n`);
    for (const rule of o.rules) {
      const cells = [`\`${rule}\`: ${MISREADINGS[rule]}`, ...names.map((n) => counts[rule][n]), total(rule)];
      process.stdout.write(`| ${cells.map((c) => c.toLocaleString("en-US")).join(" | ")} |\n`);
    }
    return;
  }
  const width = Math.max(...o.rules.map((r) => r.length));
  const cols = [...names, "total"];
  const widths = cols.map((c) => Math.max(c.length, 7));
  const row = (first, cells) =>
    `${first.padEnd(width)}  ${cells.map((c, i) => String(c).padStart(widths[i])).join("  ")}\n`;
  process.stdout.write(row("misreading", cols));
  for (const rule of o.rules) {
    process.stdout.write(row(rule, [...names.map((n) => counts[rule][n]), total(rule)]));
  }
}

main();
