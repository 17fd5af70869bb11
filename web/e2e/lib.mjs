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

/** fits fails when the page is wider than its viewport: on a phone
 * nothing may need a sideways scroll of the page (a wide table scrolls in
 * its own box). It names the elements that stick out. */
export async function fits(page, name) {
  const r = await page.evaluate(() => {
    const w = document.documentElement.scrollWidth;
    if (w <= window.innerWidth) return null;
    const out = [...document.querySelectorAll("body *")]
      .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5)
      .slice(-5)
      .map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className && typeof e.className === "string" ? "." + e.className.split(" ").join(".") : ""));
    return { w, vw: window.innerWidth, out };
  });
  if (r) throw new Error(`${name}: the page is ${r.w} px wide in a ${r.vw} px viewport (sticking out: ${r.out.join(", ")})`);
}

/** shoot saves a screenshot of page at each size, light and dark, and
 * checks it with axe; at the phone's size the page must fit its width. */
export async function shoot(page, dir, name) {
  for (const scheme of ["light", "dark"]) {
    // the dark theme follows the system's choice
    await page.emulateMedia({ colorScheme: scheme });
    for (const [size, vp] of Object.entries(sizes)) {
      await page.setViewportSize(vp);
      await page.waitForTimeout(150);
      const shot = `${name}-${size}${scheme === "dark" ? "-dark" : ""}`;
      await page.screenshot({ path: `${dir}/${shot}.png`, fullPage: true });
      await axe(page, `${name} (${size}, ${scheme})`);
      if (size === "phone") await fits(page, `${name} (${size}, ${scheme})`);
    }
  }
  await page.setViewportSize(sizes.desktop);
  await page.emulateMedia({ colorScheme: "light" });
}

/** menu checks, at the phone's size in light and dark, that every section
 * of the desktop's navigation is reached through the menu, that each
 * section's page fits the width and that its tab is named after it. */
export async function menu(page, dir) {
  await page.setViewportSize(sizes.desktop);
  const nav = page.getByRole("navigation", { name: "Sections" });
  const sections = await nav.getByRole("link").evaluateAll((as) => as.map((a) => ({ label: a.textContent.trim(), path: new URL(a.href).pathname })));
  if (sections.length < 9) throw new Error("the navigation has only " + sections.map((s) => s.label).join(", "));
  await page.setViewportSize(sizes.phone);
  const button = page.getByRole("button", { name: "Menu" });
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const s of sections) {
      if (await nav.getByRole("link", { name: s.label, exact: true }).isVisible()) throw new Error(`${s.label} shows before the menu is opened`);
      await button.click();
      if ((await button.getAttribute("aria-expanded")) !== "true") throw new Error("the menu button does not say it is open");
      if (s === sections[0]) await page.screenshot({ path: `${dir}/menu-phone${scheme === "dark" ? "-dark" : ""}.png` });
      await nav.getByRole("link", { name: s.label, exact: true }).click();
      await page.waitForURL((u) => u.pathname === s.path);
      await page.getByRole("heading", { level: 1 }).first().waitFor();
      await page.waitForTimeout(300);
      const title = await page.title();
      if (!title.startsWith(s.label)) throw new Error(`${s.path}: the tab is titled ${JSON.stringify(title)}`);
      await fits(page, `${s.path} (phone, ${scheme})`);
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize(sizes.desktop);
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
