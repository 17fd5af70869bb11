// The automation editor's form, in the browser: a definition built from
// fields (trigger, inputs, blocks with a condition's branches, settings),
// a problem shown on its field, the text tab showing the same definition
// (and text the form cannot show kept there), what was saved read back
// from the API, and an edit saved as a new version.
import { step } from "./lib.mjs";

const api = (page, path) =>
  page.evaluate(async (p) => {
    const r = await fetch(p, { headers: { authorization: "Bearer " + localStorage.getItem("engrams.token") } });
    return { status: r.status, body: await r.json() };
  }, path);

export async function automationForm(page, base, shoot) {
  step("automations: build one in the form (a schedule, an input, a condition's branches, settings), a problem on its field, the text tab");
  await page.goto(base + "/automations/new");
  const form = page.getByTestId("automation-form");
  await form.waitFor();
  await page.getByLabel("Start from").selectOption({ label: "Webhook starts a task" });
  await form.getByLabel("Name", { exact: true }).fill("form-built");
  await form.getByLabel("Started by").selectOption("schedule");
  await form.getByLabel("Cron schedule").fill("0 9 * * 1-5");
  await form.getByLabel("Time zone").fill("Europe/Paris");
  await form.getByRole("button", { name: "Add an input" }).click();
  await form.getByLabel("Input 2 name").fill("branch");
  await form.getByLabel("Input 2 default").fill("main");
  await form.getByLabel("Input 2 required").check();

  await form.getByLabel("Kind of block to add to the automation").selectOption("condition");
  await form.getByRole("button", { name: "Add a block to the automation" }).click();
  const cond = form.locator('[data-testid="block"][data-block="condition"]');
  await cond.getByLabel("If", { exact: true }).fill("{{inputs.branch}}");
  await form.getByRole("button", { name: "Move condition up" }).click();
  if ((await cond.getAttribute("data-place")) !== "blocks[2]") throw new Error("the condition did not move up: " + (await cond.getAttribute("data-place")));
  await cond.getByLabel("Kind of block to add to condition then").selectOption("send_prompt");
  await cond.getByRole("button", { name: "Add a block to condition then" }).click();
  await cond.getByLabel("Kind of block to add to condition else").selectOption("run_command");
  await cond.getByRole("button", { name: "Add a block to condition else" }).click();
  const send = cond.locator('[data-testid="block"][data-place="blocks[2].then[0]"]');
  await send.getByLabel("Prompt", { exact: true }).fill("Check out {{inputs.brnch}}");
  await cond.locator('[data-place="blocks[2].else[0]"]').getByLabel("Command", { exact: true }).fill("git status");
  await form.getByLabel("Concurrency key").fill("{{inputs.branch}}");
  await form.getByLabel("Policy").selectOption("supersede");

  await page.getByRole("button", { name: "Create automation" }).click();
  await send.getByRole("alert").getByText("{{inputs.brnch}} names no input").waitFor();
  const listed = await page.getByTestId("definition-problems").innerText();
  if (!listed.includes("blocks[2].then[0].prompt")) throw new Error("the problem list does not name the place: " + listed);
  await shoot(page, "automation-form-problem");
  await send.getByLabel("Prompt", { exact: true }).fill("Check out {{inputs.branch}}");

  await page.getByRole("tab", { name: "Text (YAML or JSON)" }).click();
  const text = await page.getByLabel("Definition (YAML or JSON)").inputValue();
  for (const want of ["name: form-built", "kind: schedule", "time_zone: Europe/Paris", "then:", "else:", "command: git status", "policy: supersede"]) {
    if (!text.includes(want)) throw new Error(`the text tab lacks ${want}:\n${text}`);
  }
  await page.getByLabel("Definition (YAML or JSON)").fill(text.replace("command: git status", "command: git status\n        colour: red"));
  await page.getByRole("tab", { name: "Form" }).click();
  await page.getByTestId("mode-problem").getByText("blocks[2].else[0].colour: the form has no such field").waitFor();
  await page.getByLabel("Definition (YAML or JSON)").fill(text.replace("command: git status", "command: git log -1"));
  await page.getByRole("tab", { name: "Form" }).click();
  if ((await cond.locator('[data-place="blocks[2].else[0]"]').getByLabel("Command", { exact: true }).inputValue()) !== "git log -1") throw new Error("the form did not take the text's edit");

  await page.getByRole("button", { name: "Create automation" }).click();
  await page.waitForURL(base + "/automations/form-built");
  await page.getByTestId("automation-summary").getByText("schedule trigger").waitFor();
  await shoot(page, "automation-form");
  const { status, body } = await api(page, "/v1/automations/form-built");
  const d = body.definition;
  const c = d?.blocks?.[2];
  const ok =
    status === 200 &&
    d.trigger.cron === "0 9 * * 1-5" &&
    d.trigger.time_zone === "Europe/Paris" &&
    d.inputs?.[1]?.name === "branch" && d.inputs[1].default === "main" && d.inputs[1].required === true &&
    d.blocks.map((b) => b.id).join(",") === "task,idle,condition,stop" &&
    c.kind === "condition" && c.if === "{{inputs.branch}}" &&
    c.then?.[0]?.kind === "send_prompt" && c.then[0].task === "task" && c.then[0].prompt === "Check out {{inputs.branch}}" &&
    c.else?.[0]?.kind === "run_command" && c.else[0].command === "git log -1" &&
    d.settings?.policy === "supersede" && d.settings.concurrency_key === "{{inputs.branch}}";
  if (!ok) throw new Error(`the saved definition is not what the form built: ${status} ${JSON.stringify(body)}`);

  step("automations: edit the saved one in the form: a new version");
  await cond.locator('[data-place="blocks[2].else[0]"]').getByLabel("Command", { exact: true }).fill("git log -2");
  await page.getByRole("button", { name: "Save a new version" }).click();
  await page.getByTestId("automation-summary").getByText("Version 2").waitFor();
  const v2 = await api(page, "/v1/automations/form-built");
  if (v2.body.definition?.blocks?.[2]?.else?.[0]?.command !== "git log -2") throw new Error("the edit was not saved: " + JSON.stringify(v2.body));
}
