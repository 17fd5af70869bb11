// The dashboard terminal shows the shell as it is: a prompt, what a
// command writes to stderr and its colours. Shared by the browser tests
// that open a terminal tab.
import { until } from "./lib.mjs";

/** rows returns the terminal's lines as xterm.js renders them. */
async function rows(page) {
  return (await page.locator(".xterm-rows").innerText()).split("\n").map((l) => l.replace(/\u00a0/g, " ").trimEnd());
}

/**
 * checkShell types into the connected terminal of page a command that
 * fails on stderr, a line to stderr and a coloured word, and waits for
 * each on screen after a prompt, and for the next prompt.
 */
export async function checkShell(page) {
  await page.getByTestId("terminal").click();
  await until("the shell's first prompt", 30_000, async () => (await rows(page)).some((l) => /[#$] ?$/.test(l)));
  await page.keyboard.type("ls /nonexistent; echo err >&2\n");
  await until("ls's error, the line written to stderr and a prompt after them", 30_000, async () => {
    const ls = await rows(page);
    const typed = ls.findIndex((l) => /[#$] ls \/nonexistent; echo err >&2$/.test(l));
    if (typed < 0) return false;
    const after = ls.slice(typed + 1);
    const failed = after.findIndex((l) => l.includes("/nonexistent") && l.includes("No such file or directory"));
    const err = after.findIndex((l) => l === "err");
    return failed >= 0 && err > failed && after.slice(err + 1).some((l) => /[#$] ?$/.test(l));
  });
  await page.keyboard.type("printf '\\033[31m%s\\033[0m\\n' colour-$((6*7))\n");
  await until("colour-42 in red (ANSI colour 1)", 30_000, async () => (await page.locator(".xterm-rows .xterm-fg-1", { hasText: "colour-42" }).count()) > 0);
}
