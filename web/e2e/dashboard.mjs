// The dashboard used as people use it, in Debian's chromium, against
// `engrams dev` with a QEMU host and a scripted model server (set up by
// internal/e2e TestDashboardInBrowser, which passes a JSON config):
// sign in with the printed link, start a task from the composer, see the
// streamed answer, the Changes and Terminal tabs (prompt, stderr, colours), the session badge turn
// Idle when the CLI suspends it, a follow-up resume it and answer, the
// receipt change with the allowlist before saving, an image's enable
// stages, automations made from text, a built-in and the form, run and
// watched step by step; members, their groups, a profile granted to a
// group, the organisation's keys and the audit log (peopleAdmin.mjs);
// every page screenshotted at both sizes, light and dark, and checked by
// axe-core; at 390 px no page is wider than the screen and every section
// is reached through the menu.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { automationForm } from "./automationForm.mjs";
import { axe, launch, menu, shoot, step, until } from "./lib.mjs";
import { peopleAdmin } from "./peopleAdmin.mjs";
import { checkShell } from "./shell.mjs";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
mkdirSync(cfg.artifacts, { recursive: true });
const base = cfg.baseURL;
const browser = await launch();
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
const errors = [];
page.on("pageerror", (e) => errors.push(e.message));
page.on("console", (m) => m.type() === "error" && console.log("console error:", m.text()));
const cli = (...args) => execFileSync(cfg.cli, args, { env: { ...process.env, ENGRAMS_CONFIG: cfg.cliConfig }, encoding: "utf8" });

try {
  step("open the printed login link");
  await page.goto(cfg.loginURL);
  await page.waitForURL(base + "/tasks");
  await page.getByRole("heading", { name: "Tasks" }).waitFor();
  await shoot(page, cfg.artifacts, "tasks-empty");

  step("start a task from the composer, with the receipt shown before launch");
  await page.getByRole("link", { name: "Start a task" }).click();
  await page.getByLabel("What should the agent do?").fill(cfg.prompt);
  await page.getByLabel("Profile").selectOption(cfg.profile);
  await page.getByRole("region", { name: "Grant receipt" }).getByText(cfg.image).first().waitFor();
  await shoot(page, cfg.artifacts, "composer");
  await page.getByRole("button", { name: "Start task" }).click();
  await page.waitForURL(/\/tasks\/(?!new$)[^/?]+$/);
  const taskURL = page.url();

  step("see the streamed assistant text");
  await page.getByTestId("assistant-text").filter({ hasText: cfg.firstAnswer }).waitFor({ timeout: 600_000 });
  await page.getByText("Turn done").first().waitFor({ timeout: 120_000 });

  step("the turn's usage, and the task's model, tokens and cost, as the scripted model reported them");
  await page.getByTestId("turn-usage").filter({ hasText: `${cfg.usageModel} · ${cfg.usageTokens} tokens · ${cfg.usageCost}` }).first().waitFor({ timeout: 30_000 });
  await page.getByTestId("task-tokens").filter({ hasText: cfg.usageTokens }).waitFor({ timeout: 30_000 });
  const cost = await page.getByTestId("task-cost").innerText();
  const model = await page.getByTestId("task-model").innerText();
  const starter = await page.getByTestId("task-started-by").innerText();
  if (cost.trim() !== cfg.usageCost || model.trim() !== cfg.usageModel || !starter.startsWith("token signin-link"))
    throw new Error(`task cost ${JSON.stringify(cost)}, model ${JSON.stringify(model)}, started by ${JSON.stringify(starter)}`);
  // a tool call names the file it wrote; the tab names the task
  await page.locator(".tool .tool-subject").filter({ hasText: cfg.changedFile }).first().waitFor({ timeout: 10_000 });
  if (!(await page.title()).endsWith(" · Task · engrams")) throw new Error("the task's tab is titled " + (await page.title()));
  await shoot(page, cfg.artifacts, "task-conversation");

  step("open Changes and see the file the agent wrote");
  await page.getByRole("tab", { name: "Changes" }).click();
  await page.getByTestId("file-diff").filter({ hasText: cfg.changedFile }).waitFor({ timeout: 120_000 });
  await page.getByLabel("GitHub repository").fill(cfg.prRepo);
  await page.getByRole("button", { name: "Open a pull request" }).click();
  await page.getByTestId("open-pr").getByRole("link", { name: "pull request #1" }).waitFor({ timeout: 120_000 });
  await shoot(page, cfg.artifacts, "task-changes");

  step("the Files tab: upload a file, browse to it, view and download it");
  await page.getByRole("tab", { name: "Files" }).click();
  await page.getByRole("button", { name: "app/" }).waitFor({ timeout: 60_000 });
  await page.locator('input[type="file"]').setInputFiles({ name: "uploaded.txt", mimeType: "text/plain", buffer: Buffer.from("from the browser\n") });
  await page.getByRole("button", { name: "uploaded.txt" }).click();
  await page.locator(".file-view").filter({ hasText: "from the browser" }).waitFor({ timeout: 30_000 });
  const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: "Download" }).click()]);
  const got = readFileSync(await download.path(), "utf8");
  if (got !== "from the browser\n" || download.suggestedFilename() !== "uploaded.txt") throw new Error(`downloaded ${download.suggestedFilename()}: ${JSON.stringify(got)}`);
  await page.getByRole("button", { name: "Up" }).click();
  await page.getByRole("button", { name: "app/" }).waitFor();
  await shoot(page, cfg.artifacts, "task-files");

  step("run ls /work in the Terminal tab");
  await page.getByRole("tab", { name: "Terminal" }).click();
  await page.getByTestId("terminal-status").filter({ hasText: "connected" }).waitFor({ timeout: 60_000 });
  await page.getByTestId("terminal").click();
  await page.keyboard.type("ls /work; echo marker-$((6*7))\n");
  await until("ls /work's output in the terminal", 30_000, async () => {
    const t = await page.locator(".xterm-rows").innerText();
    return t.includes("marker-42") && t.includes("app");
  });
  step("the terminal shows the shell as it is: `ls /nonexistent; echo err >&2` shows both messages and a prompt");
  await checkShell(page);
  await shoot(page, cfg.artifacts, "task-terminal");

  step("suspend the session from the CLI: the badge turns Idle without a reload");
  await page.goto(taskURL);
  const href = await page.getByTestId("session-badge").getAttribute("href");
  const sid = href.split("/").pop();
  let reloaded = false;
  page.once("load", () => (reloaded = true));
  console.log(cli("session", "suspend", sid));
  await page.getByTestId("session-badge").locator('[data-state="idle"]').waitFor({ timeout: 120_000 });
  if (reloaded) throw new Error("the page reloaded");

  step("send a follow-up: the session resumes and answers");
  await page.getByLabel("Follow-up").fill(cfg.followUp);
  await page.getByLabel("Follow-up").press("Enter");
  await page.getByTestId("assistant-text").filter({ hasText: cfg.followUpAnswer }).waitFor({ timeout: 600_000 });
  await page.getByTestId("session-badge").locator('[data-state="active"]').waitFor({ timeout: 60_000 });

  step("the task list shows the task, and one started elsewhere appears without a reload");
  await page.getByRole("link", { name: "Tasks" }).first().click();
  await page.getByTestId("task-list").getByText(cfg.prompt).waitFor();
  const listed = await page.getByTestId("task-list").locator("tr", { hasText: cfg.prompt }).getByTestId("task-list-cost").innerText();
  if (!/^\$\d+\.\d+$/.test(listed.trim())) throw new Error(`the task list's cost ${JSON.stringify(listed)}`);
  reloaded = false;
  page.once("load", () => (reloaded = true));
  console.log(cli("task", "start", "--profile", cfg.profile, "a task from the CLI"));
  await page.getByTestId("task-list").getByText("a task from the CLI").waitFor({ timeout: 10_000 });
  if (reloaded) throw new Error("the page reloaded");
  await shoot(page, cfg.artifacts, "tasks");

  step("sessions: the list and the session's page");
  await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Sessions" }).click();
  await page.getByTestId("session-list").waitFor();
  const taskPath = new URL(taskURL).pathname;
  await page.getByTestId("session-list").locator(`a[href="${taskPath}"]`).first().waitFor({ timeout: 10_000 });
  await shoot(page, cfg.artifacts, "sessions");
  await page.goto(base + "/sessions/" + sid);
  await page.getByRole("heading", { name: "Ops" }).waitFor();
  // the session links its task; its suspend reads as one, not as the op's evict
  await page.getByTestId("session-task").locator(`a[href="${taskPath}"]`).waitFor({ timeout: 10_000 });
  await page.getByRole("cell", { name: "suspend", exact: true }).first().waitFor();
  if ((await page.locator("main").innerText()).includes("evict")) throw new Error("the session page says evict");
  await shoot(page, cfg.artifacts, "session");

  step("change a profile's allowlist and a repository's grant: the receipt and problems change before saving");
  await page.goto(base + "/profiles");
  await page.getByTestId("profile-list").waitFor();
  await shoot(page, cfg.artifacts, "profiles");
  await page.getByRole("link", { name: cfg.profile }).click();
  await page.getByLabel("Allowed hosts").fill("pkg.example.org");
  await page.getByTestId("receipt-hosts").getByText("pkg.example.org").waitFor({ timeout: 20_000 });
  await page.getByLabel("Allowed hosts").fill("pkg.example.org\n-bad host-");
  await page.locator("#p-egress-err").waitFor({ timeout: 20_000 });
  // push and API use are per repository; on a plain-http repository they are a problem
  await page.getByLabel("Repository 1: the agent may push").check();
  await page.locator("#p-repos-err").getByText("push and api are brokered for https URLs").waitFor({ timeout: 20_000 });
  // the idle timeout is a duration, as in the CLI
  await page.getByLabel("Idle timeout").fill("soon");
  await page.locator("#p-idle-err").getByText("want a duration").waitFor();
  await page.getByLabel("Idle timeout").fill("15m");
  await page.locator("#p-idle-err").waitFor({ state: "detached" });
  await shoot(page, cfg.artifacts, "profile-editor");
  await page.goto(base + "/profiles/new");
  await page.getByLabel("Name").waitFor();
  await shoot(page, cfg.artifacts, "profile-new");

  step("enable an image and watch its stages progress");
  await page.goto(base + "/images");
  await page.getByText("Enable an image").click();
  await page.getByLabel("Reference").fill(cfg.enableRef);
  await page.getByLabel("Name", { exact: true }).fill(cfg.enableName);
  await page.getByRole("button", { name: "Enable", exact: true }).click();
  await page.waitForURL(base + "/images/" + cfg.enableName);
  const seen = new Set();
  await until("the image to be ready", 600_000, async () => {
    const s = await page.getByTestId("job-progress").getAttribute("data-state");
    const stage = await page.getByTestId("job-stage").innerText();
    seen.add(s);
    if (!seen.has(stage)) console.log("image job:", stage);
    seen.add(stage);
    if (s === "failed") throw new Error("the image failed: " + stage);
    return s === "ready";
  });
  const states = [...seen].filter((x) => ["pending", "materializing", "capturing", "ready"].includes(x));
  console.log("image job states seen:", states.join(" → "));
  if (states.length < 2) throw new Error("saw only " + states.join(", ") + " of the enable's stages");
  await shoot(page, cfg.artifacts, "image");
  await page.goto(base + "/images");
  await page.getByTestId("image-list").waitFor();
  await shoot(page, cfg.artifacts, "images");

  step("automations: create one from a template (a bad definition shows its problem by place), test-run it, watch its steps");
  await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Automations" }).click();
  await page.getByRole("heading", { name: "Automations", exact: true }).waitFor();
  await shoot(page, cfg.artifacts, "automations-empty");
  await page.getByRole("link", { name: "New automation" }).click();
  await page.getByLabel("Start from").selectOption({ label: "Run by hand with inputs" });
  await page.getByRole("tab", { name: "Text (YAML or JSON)" }).click();
  const def = page.getByLabel("Definition (YAML or JSON)");
  const good = await def.inputValue();
  if (!good.includes("name: by-hand")) throw new Error("the template did not fill the definition: " + good);
  if (!new RegExp(`profile: "?${cfg.profile}"?\n`).test(good)) throw new Error("the template does not name the profile " + cfg.profile + ": " + good);
  await def.fill(good.replace("kind: start_task", "kind: teleport"));
  await page.getByRole("button", { name: "Create automation" }).click();
  await page.getByTestId("definition-problems").getByText('unknown block "teleport"').waitFor();
  const probText = await page.getByTestId("definition-problems").innerText();
  if (!probText.includes("blocks[0].kind")) throw new Error("the problem does not name its place: " + probText);
  await shoot(page, cfg.artifacts, "automation-problems");
  await def.fill(good);
  await page.getByRole("button", { name: "Create automation" }).click();
  await page.waitForURL(base + "/automations/by-hand");
  await page.getByTestId("automation-summary").getByText("Version 1").waitFor();
  await page.getByLabel(/^topic/).fill(cfg.prompt);
  await shoot(page, cfg.artifacts, "automation-editor");
  await page.getByRole("button", { name: "Start a test run" }).click();
  await page.waitForURL(/\/runs\//);
  const timeline = page.getByTestId("step-timeline");
  await timeline.waitFor({ timeout: 60_000 });
  await until("the run's last step to succeed", 300_000, async () => {
    const failed = await page.locator('[data-testid="step"][data-state="failed"]').count();
    if (failed > 0) throw new Error("a step failed: " + (await timeline.innerText()));
    return (await page.locator('[data-testid="step"][data-block="stop"][data-state="succeeded"]').count()) === 1;
  });
  const blocks = await page.locator('[data-testid="step"]').evaluateAll((els) => els.map((e) => e.getAttribute("data-block")));
  if (blocks.join(",") !== "task,idle,check,stop") throw new Error("steps in the timeline: " + blocks.join(","));
  await page.locator('[data-testid="step"][data-block="idle"] summary').click();
  const idleOut = await page.locator('[data-testid="step"][data-block="idle"]').getByTestId("step-output").innerText();
  if (!idleOut.includes(cfg.firstAnswer)) throw new Error("the wait step's output is not the agent's answer: " + idleOut);
  await page.getByTestId("step-timeline").getByText("Succeeded").first().waitFor();
  await shoot(page, cfg.artifacts, "run");
  await page.getByRole("link", { name: "by-hand" }).click();
  await page.getByTestId("run-list").getByText("Succeeded").waitFor({ timeout: 10_000 });
  await page.goto(base + "/automations");
  await page.getByTestId("automation-list").getByRole("link", { name: "by-hand" }).waitFor();
  await shoot(page, cfg.artifacts, "automations");

  step("automations: create one from a built-in, test-run it with a sample payload");
  await page.goto(base + "/automations/new");
  await page.getByLabel("Start from").selectOption({ label: "Built-in: slack-threads (slack)" });
  await page.getByRole("tab", { name: "Text (YAML or JSON)" }).click();
  if (!(await def.inputValue()).includes("kind: slack_mention")) throw new Error("the built-in did not fill the definition");
  await page.getByRole("button", { name: "Create automation" }).click();
  await page.waitForURL(base + "/automations/slack-threads");
  await page.getByLabel("Sample trigger payload (JSON)").fill(JSON.stringify({ profile: cfg.profile, text: cfg.followUp, channel: "C1", thread_ts: "1.1" }));
  await page.getByRole("button", { name: "Start a test run" }).click();
  await page.waitForURL(/\/runs\//);
  await until("the built-in's run to succeed", 120_000, async () => {
    if ((await page.locator('[data-testid="step"][data-state="failed"]').count()) > 0) throw new Error("a step failed: " + (await page.getByTestId("step-timeline").innerText()));
    return (await page.locator('[data-testid="step"][data-block="task"][data-state="succeeded"]').count()) === 1;
  });
  await page.locator('.head [data-state="succeeded"]').waitFor({ timeout: 30_000 });

  await automationForm(page, base, (p, name) => shoot(p, cfg.artifacts, name));

  step("settings: the integrations, and Slack added from the form (its built-in installed)");
  await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Settings" }).click();
  await page.getByTestId("integration-list").getByText("github").waitFor();
  await page.getByLabel("Service").selectOption("slack");
  await page.getByLabel("bot_token").fill("xoxb-from-the-browser");
  await page.getByLabel("signing_secret").fill("signing-from-the-browser");
  await page.getByLabel("Settings (JSON)").fill(JSON.stringify({ default_profile: cfg.profile }));
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("status").filter({ hasText: "Configured slack" }).waitFor();
  await page.getByTestId("integration-list").getByText("slack", { exact: true }).waitFor();
  if ((await page.content()).includes("xoxb-from-the-browser")) throw new Error("the page shows a credential after saving");
  await shoot(page, cfg.artifacts, "settings");

  step("on a phone every section is reached through the menu, light and dark, and fits the width");
  await menu(page, cfg.artifacts);

  step("people: an owner adds a member, sees them listed, and may give roles up to owner");
  await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "People" }).click();
  await page.getByTestId("member-list").waitFor();
  await page.getByLabel("Email").fill("grace@example.com");
  await page.getByLabel("Role", { exact: true }).selectOption("member");
  await page.getByRole("button", { name: "Add member" }).click();
  await page.getByTestId("member-list").getByText("grace@example.com").waitFor();
  await page.getByLabel("Role of grace@example.com").selectOption("admin");
  await until("grace's new role", 10_000, async () => (await page.evaluate(async () => (await (await fetch("/v1/members")).json()).items)).some((m) => m.email === "grace@example.com" && m.role === "admin"));

  await peopleAdmin(page, base, cli, (p, name) => shoot(p, cfg.artifacts, name));

  step("the operator pages");
  for (const [path, name, heading] of [
    ["/harnesses", "harnesses", "Harnesses"],
    ["/secrets", "secrets", "Secrets"],
    ["/hosts", "hosts", "Hosts"],
    ["/people", "people", "People"],
    ["/account", "account", "Account"],
  ]) {
    await page.goto(base + path);
    await page.getByRole("heading", { name: heading, exact: true }).waitFor();
    await page.waitForTimeout(300);
    await shoot(page, cfg.artifacts, name);
  }

  step("sign out: the sign-in cookie is revoked server-side; the login page; a used login link is refused; an API key signs in");
  const cookies = await page.context().cookies(base);
  const session = cookies.find((c) => c.name === "engrams_session");
  if (!session || !session.httpOnly || session.sameSite !== "Lax") throw new Error("the login link's sign-in cookie: " + JSON.stringify(session));
  if (await page.evaluate(() => localStorage.getItem("engrams.token"))) throw new Error("a login link's sign-in left a key in localStorage");
  if (await page.evaluate(() => document.cookie.includes("engrams_session"))) throw new Error("scripts can read the sign-in cookie");
  const forged = await fetch(base + "/v1/tokens", { method: "POST", headers: { Cookie: "engrams_session=" + session.value, "Content-Type": "application/json" }, body: '{"name":"forged"}' });
  if (forged.status !== 403) throw new Error(`a write by cookie without the anti-forgery header answers ${forged.status}, want 403`);
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("API key").waitFor();
  const after = await fetch(base + "/v1/me", { headers: { Cookie: "engrams_session=" + session.value } });
  if (after.status !== 401) throw new Error(`the signed-out cookie still answers ${after.status} on /v1/me, want 401`);
  await shoot(page, cfg.artifacts, "login");
  await page.goto(cfg.loginURL);
  await page.getByRole("alert").filter({ hasText: "unknown, used or expired" }).waitFor();
  await page.getByLabel("API key").fill("egr_not-a-token");
  await page.getByRole("button", { name: "Sign in with a key" }).click();
  await page.getByRole("alert").filter({ hasText: "not valid" }).waitFor();
  await page.getByLabel("API key").fill(cfg.token);
  await page.getByRole("button", { name: "Sign in with a key" }).click();
  await page.waitForURL(base + "/tasks");
  await page.getByTestId("task-list").waitFor();
  if (errors.length > 0) throw new Error("page errors: " + errors.join("; "));
  console.log("dashboard: every step passed");
} catch (e) {
  await page.screenshot({ path: cfg.artifacts + "/failure.png", fullPage: true }).catch(() => undefined);
  console.error("FAILED:", e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}
