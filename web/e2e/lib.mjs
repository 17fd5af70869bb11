// What the dashboard's browser tests share: Debian's chromium through
// playwright-core, screenshots at the two sizes the dashboard is made
// for, and axe-core's check of a page.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

export const sizes = {
  desktop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
};

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}

/** step logs what the test does, so a failure says where. */
export function step(what) {
  console.log(new Date().toISOString().slice(11, 23), "step:", what);
}

/** axe runs axe-core on the page; serious and critical violations fail. */
export async function axe(page, name) {
  await page.evaluate(axeSource);
  const res = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
  });
  const bad = res.filter((v) => v.impact === "serious" || v.impact === "critical");
  for (const v of res) console.log(`axe ${name}: ${v.impact} ${v.id}: ${v.help} (${v.nodes.join(", ")})`);
  if (bad.length > 0) throw new Error(`axe: ${bad.length} serious or critical violations on ${name}: ${bad.map((v) => v.id).join(", ")}`);
}

/** shoot saves a screenshot of page at each size and checks it with axe. */
export async function shoot(page, dir, name) {
  for (const [size, vp] of Object.entries(sizes)) {
    await page.setViewportSize(vp);
    await page.waitForTimeout(150);
    await page.screenshot({ path: `${dir}/${name}-${size}.png`, fullPage: true });
    await axe(page, `${name} (${size})`);
  }
  await page.setViewportSize(sizes.desktop);
  // The dark theme (the system's choice) at the desktop size.
  await page.emulateMedia({ colorScheme: "dark" });
  await page.waitForTimeout(100);
  await page.screenshot({ path: `${dir}/${name}-desktop-dark.png`, fullPage: true });
  await axe(page, `${name} (desktop, dark)`);
  await page.emulateMedia({ colorScheme: "light" });
}

/** until polls f until it returns a truthy value or ms pass. */
export async function until(what, ms, f) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await f();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
