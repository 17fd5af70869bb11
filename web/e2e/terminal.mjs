// The dashboard terminal on a session of the default (busybox) image,
// in Debian's chromium against `engrams dev` with a QEMU host (set up by
// internal/e2e TestDashboardTerminal, which passes a JSON config): the
// shell's prompt, stderr and colours show; screenshots at both sizes.
import { mkdirSync, readFileSync } from "node:fs";
import { launch, shoot, step } from "./lib.mjs";
import { checkShell } from "./shell.mjs";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
mkdirSync(cfg.artifacts, { recursive: true });
const browser = await launch();
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
const errors = [];
page.on("pageerror", (e) => errors.push(e.message));

try {
  step("open the printed login link");
  await page.goto(cfg.loginURL);
  await page.waitForURL(cfg.baseURL + "/tasks");

  step("open the session's Terminal tab");
  await page.goto(cfg.baseURL + "/sessions/" + cfg.sessionId);
  await page.getByRole("tab", { name: "Terminal" }).click();
  await page.getByTestId("terminal-status").filter({ hasText: "connected" }).waitFor({ timeout: 60_000 });

  step("type `ls /nonexistent; echo err >&2`: both messages and a prompt show, and colours");
  await checkShell(page);
  await shoot(page, cfg.artifacts, "session-terminal");
  if (errors.length > 0) throw new Error("page errors: " + errors.join("; "));
} catch (e) {
  await page.screenshot({ path: `${cfg.artifacts}/failure.png`, fullPage: true }).catch(() => {});
  console.log("terminal rows:", await page.locator(".xterm-rows").innerText().catch(() => "(none)"));
  throw e;
} finally {
  await browser.close();
}
