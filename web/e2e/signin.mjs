// Sign-in with the organisation's identity provider, in Debian's
// chromium, against `engrams server --oidc-issuer` and the mock OIDC
// provider of internal/oidctest (set up by internal/e2e
// TestDashboardSignInWithTheProvider, which passes a JSON config): the
// login page offers the provider; one click goes through it (code + PKCE)
// and lands on the page asked for, signed in as the member by an
// HttpOnly, SameSite=Lax cookie that scripts cannot read; writes without
// the anti-forgery header are refused; sign-out revokes the cookie on the
// server; a person the provider knows but engrams does not is refused. A
// member is offered no admin section (no audit log), and no page offers
// them what is an admin's (the profile editor's grants).
import { mkdirSync, readFileSync } from "node:fs";
import { launch, shoot, step } from "./lib.mjs";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
mkdirSync(cfg.artifacts, { recursive: true });
const base = cfg.baseURL;
const browser = await launch();
const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
const page = await ctx.newPage();
const errors = [];
page.on("pageerror", (e) => errors.push(e.message));

try {
  step("open a deep link signed out: the login page offers the identity provider");
  await page.goto(base + "/hosts");
  await page.waitForURL(base + "/login");
  const sso = page.getByRole("link", { name: "Sign in with your identity provider" });
  await sso.waitFor();
  await shoot(page, cfg.artifacts, "login-sso");

  step("sign in through the provider: back on the dashboard, signed in by cookie");
  await sso.click();
  await page.waitForURL(base + "/tasks");
  await page.getByRole("heading", { name: "Tasks" }).waitFor();
  const me = await page.evaluate(async () => (await fetch("/v1/me")).json());
  if (me.name !== cfg.email || me.role !== "member") throw new Error("signed in as " + JSON.stringify(me));
  const session = (await ctx.cookies(base)).find((c) => c.name === "engrams_session");
  if (!session || !session.httpOnly || session.sameSite !== "Lax" || session.path !== "/") throw new Error("the sign-in cookie: " + JSON.stringify(session));
  if (await page.evaluate(() => document.cookie.includes("engrams_session"))) throw new Error("scripts can read the sign-in cookie");
  if (await page.evaluate(() => localStorage.getItem("engrams.token"))) throw new Error("a provider sign-in left a key in localStorage");

  step("a member sees only what a member may do: no admin sections, no buttons that would answer 403");
  const nav = page.getByRole("navigation", { name: "Sections" });
  await nav.getByRole("link", { name: "Account" }).waitFor();
  const labels = await nav.getByRole("link").allTextContents();
  for (const admin of ["Secrets", "People", "Audit log", "Hosts", "Settings"]) if (labels.includes(admin)) throw new Error("a member's navigation offers " + admin + ": " + labels.join(", "));
  await nav.getByRole("link", { name: "Profiles" }).click();
  await page.getByText("An admin makes them").waitFor();
  if (await page.getByRole("link", { name: "New profile" }).count()) throw new Error("a member is offered New profile");
  await nav.getByRole("link", { name: "Images" }).click();
  await page.getByRole("heading", { name: "Images" }).waitFor();
  if (await page.getByText("Enable an image").count()) throw new Error("a member is offered to enable an image");

  step("a member opening the admins' pages by URL is told they are the admins', and offered no grants editor");
  await page.goto(base + "/audit");
  await page.getByText("The audit log is for the organisation's admins").waitFor();
  if (await page.getByTestId("audit-list").count()) throw new Error("a member is shown the audit log");
  await shoot(page, cfg.artifacts, "audit-member");
  await page.goto(base + "/people");
  await page.getByText("The organisation's admins manage its members and keys").waitFor();
  if (await page.getByTestId("org-key-list").count()) throw new Error("a member is shown the organisation's keys");
  await page.goto(base + "/profiles/new");
  await page.getByText("Only admins change profiles").waitFor();
  if ((await page.getByTestId("profile-grants").count()) || (await page.getByText("Who may use it").count())) throw new Error("a member is offered the profile's grants");
  if (await page.getByRole("button", { name: "Create profile" }).count()) throw new Error("a member is offered to create a profile");

  step("the account page: who I am, my keys, and a code to link my Slack account");
  await nav.getByRole("link", { name: "Account" }).click();
  await page.getByTestId("whoami").filter({ hasText: cfg.email }).waitFor();
  await page.getByTestId("whoami").filter({ hasText: "member" }).waitFor();
  await page.getByTestId("key-list").getByText("sign-in").first().waitFor();
  await page.getByRole("button", { name: "Link a Slack account" }).click();
  const said = await page.getByTestId("link-code").textContent();
  if (!/link [A-Z2-7]{4}(-[A-Z2-7]{4}){3}/.test(said)) throw new Error("the link code: " + said);
  await shoot(page, cfg.artifacts, "account");

  step("a write by cookie: with the page's anti-forgery header it works, without it is refused");
  const made = await page.evaluate(async () => {
    const csrf = document.cookie.split("; ").find((c) => c.startsWith("engrams_csrf="))?.slice("engrams_csrf=".length) ?? "";
    const bare = await fetch("/v1/tokens", { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"name":"forged"}' });
    const ok = await fetch("/v1/tokens", { method: "POST", headers: { "Content-Type": "application/json", "X-Engrams-CSRF": csrf }, body: '{"name":"from-the-browser"}' });
    return [bare.status, ok.status];
  });
  if (made[0] !== 403 || made[1] !== 201) throw new Error("writes by cookie without and with the header answered " + made.join(", "));

  step("sign out: the cookie is gone from the browser and refused by the API");
  await page.getByRole("button", { name: "Menu" }).isVisible().then((v) => v && page.getByRole("button", { name: "Menu" }).click());
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("link", { name: "Sign in with your identity provider" }).waitFor();
  if ((await ctx.cookies(base)).some((c) => c.name === "engrams_session")) throw new Error("sign-out left the cookie");
  const replay = await fetch(base + "/v1/me", { headers: { Cookie: "engrams_session=" + session.value } });
  if (replay.status !== 401) throw new Error(`the signed-out cookie answers ${replay.status} on /v1/me, want 401`);

  step("a person the provider signs in but engrams does not know is refused, and told how to get access");
  await fetch(cfg.switchURL, { method: "POST" });
  await page.getByRole("link", { name: "Sign in with your identity provider" }).click();
  await page.getByText("ask an admin to add you").waitFor();
  await page.screenshot({ path: cfg.artifacts + "/signin-refused.png" });
  if ((await ctx.cookies(base)).some((c) => c.name === "engrams_session")) throw new Error("a refused sign-in set a cookie");
  if (errors.length > 0) throw new Error("page errors: " + errors.join("; "));
  console.log("signin: every step passed");
} catch (e) {
  await page.screenshot({ path: cfg.artifacts + "/failure.png", fullPage: true }).catch(() => undefined);
  console.error("FAILED:", e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}
