// What an owner does with people, grants, keys and the audit log, in the
// browser: a member put in groups (a group's name shown as text, never as
// HTML), a profile granted to a group and a member rather than everyone
// (the editor and the list say so, the API has it), the organisation's
// keys with their owners and a service key revoked (it stops at once), and
// the audit log listing those actions newest first, a page at a time.
import { step, until } from "./lib.mjs";

const api = (page, path) =>
  page.evaluate(async (p) => {
    const r = await fetch(p); // same origin: the sign-in cookie goes with it
    return { status: r.status, body: await r.json() };
  }, path);

const member = "hedy@example.com";
const odd = "<i>ops</i>"; // a group's name that would be markup, if rendered as HTML

export async function peopleAdmin(page, base, cli, shoot) {
  step("people: an owner adds a member and puts them in groups; a group's name is shown as text");
  await page.goto(base + "/people");
  const list = page.getByTestId("member-list");
  await list.waitFor();
  await page.getByLabel("Email").fill(member);
  await page.getByLabel("Role", { exact: true }).selectOption("member");
  await page.getByRole("button", { name: "Add member" }).click();
  await list.getByText(member).waitFor();
  await page.getByRole("button", { name: "Edit groups of " + member }).click();
  const editor = page.getByRole("group", { name: "Groups of " + member });
  for (const g of ["backend", odd]) {
    await editor.getByLabel("New group").fill(g);
    await editor.getByRole("button", { name: "Add group" }).click();
    await editor.getByRole("button", { name: "Remove group " + g }).waitFor();
  }
  await shoot(page, "people-groups");
  await page.getByRole("button", { name: "Save groups of " + member }).click();
  await list.locator("tr", { hasText: member }).getByTestId("member-groups").getByText("backend, " + odd).waitFor();
  if ((await list.locator("i").count()) > 0) throw new Error("a group's name was rendered as HTML");
  const hedy = await until("the member's groups in the API", 10_000, async () =>
    (await api(page, "/v1/members")).body.items.find((m) => m.email === member && m.groups.join(",") === "backend," + odd),
  );

  step("profiles: a new profile granted to a group and a member, not to everyone; the editor, the list and the API say so");
  const agent = (await api(page, "/v1/profiles/agent")).body.profile;
  await page.goto(base + "/profiles/new");
  const grants = page.getByTestId("profile-grants");
  const everyone = grants.getByRole("checkbox", { name: "Everyone in the organisation" });
  if (!(await everyone.isChecked())) throw new Error("a new profile is not for everyone by default");
  await page.getByLabel("Name").fill("backend-agent");
  await page.getByLabel("Image").selectOption(agent.spec.image);
  await page.getByLabel("Harness").selectOption(agent.spec.harness);
  for (const c of agent.spec.credentials ?? []) await page.getByRole("checkbox", { name: new RegExp(`^${c} \\(`) }).check();
  await everyone.uncheck();
  await grants.getByLabel("New group").fill("backend");
  await grants.getByRole("button", { name: "Add group" }).click();
  await grants.getByLabel("Member to grant").selectOption({ label: member });
  await grants.getByRole("button", { name: "Add member" }).click();
  await page.getByRole("button", { name: "Create profile" }).click();
  await page.waitForURL(base + "/profiles/backend-agent");
  await grants.getByRole("button", { name: "Remove group backend" }).waitFor();
  await grants.getByRole("button", { name: "Remove member " + member }).waitFor();
  if (await everyone.isChecked()) throw new Error("the saved profile reads as granted to everyone");
  await shoot(page, "profile-grants");
  const saved = (await api(page, "/v1/profiles/backend-agent")).body.profile.grants.map((g) => g.kind + ":" + (g.subject ?? "")).sort();
  if (saved.join(",") !== ["group:backend", "user:" + hedy.user_id].join(",")) throw new Error("the profile's grants in the API: " + saved.join(", "));
  await page.goto(base + "/profiles");
  const who = (name) => page.getByTestId("profile-list").locator("tr", { has: page.getByRole("link", { name, exact: true }) }).getByTestId("profile-who").innerText();
  await until("the list to say who may use each profile", 10_000, async () => {
    const [b, a] = [await who("backend-agent"), await who("agent")];
    if (b === `member: ${member}, group: backend` && a === "Admins only") return true;
    throw new Error(`backend-agent is for ${b}, agent for ${a}`);
  });
  await shoot(page, "profiles-grants");

  step("keys: every key of the organisation with its owner; a service key revoked stops at once");
  const secret = cli("token", "create", "ci-bot", "--service", "--role", "member", "--expires", "720h").trim();
  const asBot = () => fetch(base + "/v1/me", { headers: { Authorization: "Bearer " + secret } }).then((r) => r.status);
  if ((await asBot()) !== 200) throw new Error("the new service key does not work");
  await page.goto(base + "/people");
  const keys = page.getByTestId("org-key-list");
  const bot = keys.locator("tr", { hasText: "ci-bot" });
  const text = await bot.innerText();
  if (!/service/.test(text) || !/made by/.test(text) || !/member/.test(text) || !/in 29d|in 30d/.test(text)) throw new Error("the service key's row: " + text);
  await keys.getByText("this browser").waitFor(); // the key in use is not offered for revoking
  page.once("dialog", (d) => d.accept());
  await bot.getByRole("button", { name: "Revoke key ci-bot" }).click();
  await bot.waitFor({ state: "detached" });
  if ((await asBot()) !== 401) throw new Error("the revoked key still works");

  step("audit log: the actions just taken, newest first, with who, target, status and where from; Load more pages on");
  await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Audit log" }).click();
  const audit = page.getByTestId("audit-list");
  // members are named by email once the page has read them
  const rows = await until("the actions in the audit log, newest first", 10_000, async () => {
    const rows = await audit.locator("tbody tr").allInnerTexts();
    const at = (action, what) => rows.findIndex((r) => r.includes(action) && r.includes(what));
    const order = [at("key.revoke", "key "), at("profile.create", "profile backend-agent"), at("member.update", "member " + member)];
    if (!order.includes(-1) && order[0] < order[1] && order[1] < order[2] && /\b204\b/.test(rows[order[0]])) return rows;
    throw new Error("order " + order + ":\n" + rows.slice(0, 8).join("\n"));
  });
  await shoot(page, "audit");
  await page.goto(base + "/audit?limit=4");
  await until("a page of 4", 10_000, async () => (await audit.locator("tbody tr").count()) === 4);
  await page.getByRole("button", { name: "Load more" }).click();
  await until("two pages of 4 to be the log's first 8", 10_000, async () => {
    const paged = await audit.locator("tbody tr").allInnerTexts();
    if (paged.join("\n") === rows.slice(0, 8).join("\n")) return true;
    throw new Error(paged.length + " rows:\n" + paged.join("\n"));
  });
}
