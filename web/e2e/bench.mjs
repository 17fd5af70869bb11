// Dashboard latency, in Debian's chromium against `engrams dev` (internal/e2e
// TestBenchDashboard sets it up and passes a JSON config):
// - load: navigation start to the first paint of the task list (a fresh
//   page each run; the token already stored);
// - send: the click on Send to the answer's first text on screen (the
//   scripted model answers at once), on a task whose session is active.
// Times are taken in the page (performance.now and a MutationObserver), so
// playwright's round trips are not in them. It prints one JSON line.
import { readFileSync } from "node:fs";
import { launch } from "./lib.mjs";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
const runs = Number(cfg.runs ?? 10);
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
await ctx.addInitScript((token) => localStorage.setItem("engrams.token", token), cfg.token);

// watch records performance.now() when a selector first matches.
const watch = () => {
  window.__seen = {};
  window.__watch = (name, sel, min) => {
    const check = () => {
      if (window.__seen[name] === undefined && document.querySelectorAll(sel).length >= min) window.__seen[name] = performance.now();
    };
    new MutationObserver(check).observe(document, { childList: true, subtree: true, characterData: true });
    check();
  };
  window.__watch("list", '[data-testid="task-list"] tbody tr', 1);
};
await ctx.addInitScript(watch);

const load = [];
for (let i = 0; i < runs; i++) {
  const page = await ctx.newPage();
  await page.goto(cfg.baseURL + "/tasks");
  const t = await page.waitForFunction(() => window.__seen.list, null, { timeout: 30_000, polling: 20 });
  load.push(await t.jsonValue());
  await page.close();
}

const send = [];
const page = await ctx.newPage();
await page.goto(cfg.baseURL + "/tasks/" + cfg.taskId);
await page.getByText("Turn done").first().waitFor({ timeout: 120_000 });
for (let i = 0; i < runs; i++) {
  await page.getByText("The agent is working").waitFor({ state: "hidden", timeout: 300_000 });
  await page.getByLabel("Follow-up").fill(cfg.followUp);
  // Each run watches under its own names: an earlier run's observer,
  // still attached, must not answer for this one.
  const before = await page.evaluate((i) => {
    const sel = '[data-testid="assistant-text"]';
    const n = document.querySelectorAll(sel).length;
    window.__watch("answer" + i, sel, n + 1);
    window.__watch("prompt" + i, ".msg.user", document.querySelectorAll(".msg.user").length + 1);
    window.__sent = performance.now();
    document.querySelector(".followup button[type=submit]").click();
    return n;
  }, i);
  const t = await page.waitForFunction((i) => window.__seen["answer" + i] && window.__seen["answer" + i] - window.__sent, i, { timeout: 300_000, polling: 20 });
  send.push(await t.jsonValue());
  await page.getByText("Turn done").nth(i + 1).waitFor({ timeout: 300_000 });
  const shown = await page.evaluate((i) => window.__seen["prompt" + i] - window.__sent, i);
  console.log(`send ${i}: the prompt on screen after ${shown.toFixed(0)} ms, the answer (number ${before + 1}) after ${send[i].toFixed(0)} ms`);
}
await browser.close();
console.log(JSON.stringify({ load, send }));
