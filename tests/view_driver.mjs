// Drives a page `fsm-core view` wrote, in Debian's chromium through playwright-core, and prints
// what a user would see as one JSON document (tests/test_view.py checks it against the data).
//
//   node view_driver.mjs PLAYWRIGHT_CORE_DIR PLAN_JSON
//
// PLAN_JSON: {"page": FILE, "chromium": PATH, "click_state": [MACHINE, STATE] | null,
//             "click_arrow": [MACHINE, SVG_ID] | null, "click_row": [MACHINE, ROW] | null,
//             "open_trace": FILE | null}
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [coreDir, planText] = process.argv.slice(2);
const plan = JSON.parse(planText);
const { chromium } = createRequire(path.join(coreDir, "noop.js"))("playwright-core");

const browser = await chromium.launch({
  executablePath: plan.chromium,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const out = { errors: [], requests: [], dialogs: [] };
try {
  const page = await browser.newPage();
  const pageUrl = pathToFileURL(plan.page).href;
  page.on("pageerror", (e) => out.errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") out.errors.push(m.text());
  });
  page.on("dialog", async (d) => {
    out.dialogs.push(d.message());
    await d.dismiss();
  });
  page.on("request", (r) => {
    if (r.url() !== pageUrl) out.requests.push(r.url());
  });
  await page.goto(pageUrl);
  await page.waitForSelector("body[data-ready=true]", { timeout: 5000 });
  out.drawn = await page.$$eval("g.node[data-state]", (ns) => ns.map((n) => [n.dataset.machine, n.dataset.state]));

  if (plan.click_state) {
    const [machine, state] = plan.click_state;
    const where = `[data-machine="${machine}"][data-state="${state}"]`;
    const svgNode = await page.$(`g.node${where}`);
    await (svgNode ?? (await page.$(`button.state${where}`))).click();
    out.clicked_svg = svgNode !== null;
    out.state_details = await page.$eval("#details", (d) => ({
      machine: d.dataset.machine,
      state: d.dataset.state,
      text: d.innerText,
      rows: [...d.querySelectorAll(".row")].map((r) => ({
        id: r.dataset.row,
        guard: r.querySelector(".guard").innerText,
        effects: [...r.querySelectorAll(".effects li")].map((e) => e.innerText),
        clauses: [...r.querySelectorAll(".clause")].map((c) => [c.dataset.clause, c.innerText]),
      })),
    }));
    out.selected = await page.$$eval("g.node.selected", (ns) => ns.map((n) => n.dataset.state));
  }
  if (plan.click_arrow) {
    const [machine, id] = plan.click_arrow;
    await page.click(`g.edge[data-machine="${machine}"][id="${machine}/${id}"] text`);  // its label
    out.arrow_details = await page.$eval("#details", (d) => ({
      title: d.querySelector("h2").textContent,
      rows: [...d.querySelectorAll(".row")].map((r) => r.dataset.row),
    }));
  }
  if (plan.click_row) {
    const [machine, row] = plan.click_row;
    await page.click(`.machine[data-machine="${machine}"] details.rows summary`);
    await page.click(`button.row-link[data-machine="${machine}"][data-row="${row}"]`);
    out.row_details = await page.$eval("#details", (d) => d.innerText);
  }

  if (plan.open_trace) {
    await page.setInputFiles("#trace-file", plan.open_trace);
    await page.waitForFunction(
      (name) => [...document.querySelectorAll("#trace-select option")].some((o) => o.textContent === name),
      path.basename(plan.open_trace),
    );
  }
  const look = () =>
    page.evaluate(() => {
      const calls = (ul) =>
        [...ul.children].map((li) => ({
          action: li.querySelector(":scope > .action").textContent,
          row: li.querySelector(":scope > .row-link")?.textContent ?? null,
          inside: li.querySelector(":scope > ul.inside") ? calls(li.querySelector(":scope > ul.inside")) : [],
        }));
      const step = document.querySelector("#step ul.calls");
      return {
        index: Number(document.getElementById("step-label").dataset.index),
        label: document.getElementById("step-label").textContent,
        changed: [...document.querySelectorAll("#changed li[data-var]")].map((li) => [li.dataset.var, li.textContent]),
        active_nodes: [...document.querySelectorAll("g.node.active")].map((n) => [n.dataset.machine, n.dataset.state]),
        active_buttons: [...document.querySelectorAll("button.state.active")].map((n) => [n.dataset.machine, n.dataset.state]),
        active_instances: [...document.querySelectorAll("#instances li.active")].map((n) => n.dataset.instance),
        calls: step ? calls(step) : [],
      };
    });
  out.steps = [];
  const error = await page.$eval("#trace-error", (e) => e.textContent);
  if (error) out.errors.push(error);
  if (await page.$("#trace-select option")) {
    out.steps.push(await look());
    for (;;) {
      await page.keyboard.press("ArrowRight");
      const seen = await look();
      if (seen.index === out.steps[out.steps.length - 1].index) break;
      out.steps.push(seen);
    }
    await page.click("#prev");
    out.after_prev = await look();
  }
  out.images = await page.$$eval("img", (is) => is.length);
  out.pwned = await page.evaluate(() => window.__pwned ?? null);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out));
