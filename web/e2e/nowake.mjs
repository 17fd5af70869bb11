// Looking never resumes (issue 26), in Debian's chromium against `engrams
// dev` (set up by internal/e2e TestDashboardLookingNeverResumes, which
// passes a JSON config naming a task whose session it suspended): the
// task page (on its Changes tab, which reads the session's disk) and the
// session page stay open for a window (cfg.windowMs) and the session stays
// idle, with the same ops, all along; then the session is resumed through
// the API and both pages show it active without a reload.
import { mkdirSync, readFileSync } from "node:fs";
import { launch, shoot, step, until } from "./lib.mjs";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
mkdirSync(cfg.artifacts, { recursive: true });
const base = cfg.baseURL;
const windowMs = Number(cfg.windowMs);
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
const errors = [];

/** api calls the API as a client other than the dashboard. */
async function api(method, path) {
  const resp = await fetch(base + path, { method, headers: { Authorization: "Bearer " + cfg.token } });
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

/** asleep reads the session and fails unless it is idle with the ops it had. */
async function asleep(ops, when) {
  const s = await api("GET", "/v1/sessions/" + cfg.sessionId);
  const n = (s.ops ?? []).length;
  if (s.state !== "idle" || n !== ops) throw new Error(`${when}: the session is ${s.state} with ${n} ops (it was idle with ${ops}): looking woke it`);
  return s;
}

async function open(path) {
  const page = await ctx.newPage();
  page.on("pageerror", (e) => errors.push(path + ": " + e.message));
  page.on("console", (m) => m.type() === "error" && console.log("console error:", path, m.text()));
  await page.goto(base + path);
  return page;
}

try {
  step("sign in with the printed link");
  const login = await open("/");
  await login.goto(cfg.loginURL);
  await login.waitForURL(base + "/tasks");
  await login.close();

  const before = await api("GET", "/v1/sessions/" + cfg.sessionId);
  if (before.state !== "idle") throw new Error("the test's session is " + before.state + ", not idle");
  const ops = (before.ops ?? []).length;
  console.log(`session ${cfg.sessionId}: idle, ${ops} ops`);

  step("open the task page on its Changes tab, and the session page, on the idle session");
  const task = await open("/tasks/" + cfg.taskId + "?tab=changes");
  await task.getByTestId("session-badge").locator('[data-state="idle"]').waitFor({ timeout: 30_000 });
  await task.getByRole("button", { name: "Resume", exact: true }).waitFor();
  await task.getByTestId("suspended").getByRole("button", { name: "Resume and show the changes" }).waitFor();
  const session = await open("/sessions/" + cfg.sessionId);
  await session.getByRole("heading", { name: "Ops" }).waitFor({ timeout: 30_000 });
  await session.getByTestId("suspended").waitFor();
  await session.locator('.states [data-state="idle"]').waitFor();
  await asleep(ops, "right after opening the pages");

  step(`keep them open ${windowMs / 1000} s: the session stays idle with the same ops`);
  const end = Date.now() + windowMs;
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, Math.min(5_000, end - Date.now())));
    await asleep(ops, `${Math.round((windowMs - (end - Date.now())) / 1000)} s after opening the pages`);
  }
  await asleep(ops, `at the end of the ${windowMs / 1000} s window`);
  await shoot(task, cfg.artifacts, "task-idle");
  await shoot(session, cfg.artifacts, "session-idle");
  await asleep(ops, "after the screenshots");
  console.log(`after ${windowMs / 1000} s with both pages open: idle, ${ops} ops`);

  step("resume the session through the API: both pages show it active without a reload");
  let reloaded = false;
  for (const p of [task, session]) p.once("load", () => (reloaded = true));
  await api("POST", "/v1/sessions/" + cfg.sessionId + "/resume");
  await task.getByTestId("session-badge").locator('[data-state="active"]').waitFor({ timeout: 60_000 });
  await session.locator('.states [data-state="active"]').waitFor({ timeout: 60_000 });
  await until("the session page's ops to show the resume", 60_000, async () => (await session.locator("table.grid td").allInnerTexts()).includes("resume"));
  await task.getByTestId("suspended").waitFor({ state: "detached", timeout: 60_000 });
  await task.getByTestId("file-diff").filter({ hasText: cfg.changedFile }).waitFor({ timeout: 120_000 });
  if (reloaded) throw new Error("a page reloaded");
  await shoot(session, cfg.artifacts, "session-resumed");
  if (errors.length > 0) throw new Error("page errors: " + errors.join("; "));
  console.log("ok");
} catch (e) {
  for (const [i, p] of ctx.pages().entries()) await p.screenshot({ path: `${cfg.artifacts}/failed-${i}.png`, fullPage: true }).catch(() => undefined);
  throw e;
} finally {
  await browser.close();
}
