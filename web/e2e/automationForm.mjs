// The automation editor's form, in the browser: a definition built from
// fields (trigger, inputs, blocks with a condition's branches, a command's
// environment, settings with caps), problems shown on their fields (a
// command carrying {{…}}, a variable engrams sets), the text tab showing
// the same definition (and text the form cannot show kept there), what was
// saved read back from the API, and an edit (a pull request trigger with
// its author floor) saved as a new version.
import { step } from "./lib.mjs";

const api = (page, path) =>
  page.evaluate(async (p) => {
    const r = await fetch(p); // same origin: the sign-in cookie goes with it
    return { status: r.status, body: await r.json() };
  }, path);

export async function automationForm(page, base, shoot) {
  step("automations: build one in the form (a schedule, an input, a condition's branches, a command's environment, settings and caps), problems on their fields, the text tab");
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
  const run = cond.locator('[data-testid="block"][data-place="blocks[2].else[0]"]');
  const command = run.getByLabel("Command", { exact: true });
  await command.fill("git checkout {{inputs.branch}}"); // refused: a value placed in shell text
  await run.getByRole("button", { name: /^Add a variable/ }).click();
  await run.getByLabel("Variable 1 name").fill("BRANCH");
  await run.getByLabel("Variable 1 value").fill("{{inputs.branch}}");
  await run.getByRole("button", { name: /^Add a variable/ }).click();
  await run.getByLabel("Variable 2 name").fill("PATH"); // refused: engrams sets it
  await run.getByLabel("Variable 2 value").fill("/tmp");
  await form.getByLabel("Concurrency key").fill("{{inputs.branch}}");
  await form.getByLabel("Policy").selectOption("supersede");
  await form.getByLabel("At most at once").fill("3");
  await form.getByLabel("At most per hour").fill("-1");

  await page.getByRole("button", { name: "Create automation" }).click();
  await send.getByRole("alert").getByText("{{inputs.brnch}} names no input").waitFor();
  const listed = await page.getByTestId("definition-problems").innerText();
  for (const place of ["blocks[2].then[0].prompt", "blocks[2].else[0].command", "blocks[2].else[0].env.PATH"]) {
    if (!listed.includes(place)) throw new Error(`the problem list does not name ${place}: ${listed}`);
  }
  // each on its field: the command's, and the variable's row
  await run.locator("#" + (await command.getAttribute("id")) + "-err").getByText("a command takes no {{…}}").waitFor();
  await run.locator('[data-testid="env-row"][data-name="PATH"]').getByRole("alert").getByText('"PATH" is set by engrams or the shell').waitFor();
  if ((await run.locator('[data-testid="env-row"][data-name="BRANCH"]').getByRole("alert").count()) !== 0) throw new Error("a problem shows on the BRANCH row");
  await shoot(page, "automation-form-problem");
  await send.getByLabel("Prompt", { exact: true }).fill("Check out {{inputs.branch}}");
  await command.fill('git checkout "$BRANCH"');
  await run.getByRole("button", { name: "Remove variable 2" }).click();

  await page.getByRole("tab", { name: "Text (YAML or JSON)" }).click();
  const text = await page.getByLabel("Definition (YAML or JSON)").inputValue();
  const cmdLine = 'command: git checkout "$BRANCH"';
  for (const want of ["name: form-built", "kind: schedule", "time_zone: Europe/Paris", "then:", "else:", cmdLine, 'BRANCH: "{{inputs.branch}}"', "policy: supersede", "max_concurrent: 3", "max_per_hour: -1"]) {
    if (!text.includes(want)) throw new Error(`the text tab lacks ${want}:\n${text}`);
  }
  if (text.includes("PATH")) throw new Error("the removed variable is still in the text:\n" + text);
  await page.getByLabel("Definition (YAML or JSON)").fill(text.replace(cmdLine, cmdLine + "\n        colour: red"));
  await page.getByRole("tab", { name: "Form" }).click();
  await page.getByTestId("mode-problem").getByText("blocks[2].else[0].colour: the form has no such field").waitFor();
  await page.getByLabel("Definition (YAML or JSON)").fill(text.replace(cmdLine, 'command: git log -1 "$BRANCH"').replace("max_concurrent: 3", "max_concurrent: 4"));
  await page.getByRole("tab", { name: "Form" }).click();
  if ((await command.inputValue()) !== 'git log -1 "$BRANCH"') throw new Error("the form did not take the text's edit");
  const envShown = [await run.getByLabel("Variable 1 name").inputValue(), await run.getByLabel("Variable 1 value").inputValue(), await form.getByLabel("At most at once").inputValue()];
  if (envShown.join(" ") !== "BRANCH {{inputs.branch}} 4") throw new Error("the form does not show the text's env and cap: " + envShown.join(" "));

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
    c.else?.[0]?.kind === "run_command" && c.else[0].command === 'git log -1 "$BRANCH"' &&
    JSON.stringify(c.else[0].env) === JSON.stringify({ BRANCH: "{{inputs.branch}}" }) &&
    d.settings?.policy === "supersede" && d.settings.concurrency_key === "{{inputs.branch}}" &&
    d.settings.max_concurrent === 4 && d.settings.max_per_hour === -1;
  if (!ok) throw new Error(`the saved definition is not what the form built: ${status} ${JSON.stringify(body)}`);

  step("automations: edit the saved one in the form (a pull request trigger, its author floor): a new version");
  await command.fill("git log -2");
  await form.getByLabel("Started by").selectOption("github_pr");
  const repos = form.getByLabel("Repositories");
  await repos.fill("acme/widgets");
  await repos.blur();
  await form.getByLabel("Authors who start runs").selectOption("member");
  await page.getByRole("button", { name: "Save a new version" }).click();
  await page.getByTestId("automation-summary").getByText("Version 2").waitFor();
  await shoot(page, "automation-form-pr");
  const v2 = await api(page, "/v1/automations/form-built");
  const d2 = v2.body.definition;
  const ok2 =
    d2?.blocks?.[2]?.else?.[0]?.command === "git log -2" &&
    d2.trigger.kind === "github_pr" && d2.trigger.repos?.join(",") === "acme/widgets" && d2.trigger.min_author === "member" &&
    d2.settings?.max_concurrent === 4;
  if (!ok2) throw new Error("the edit was not saved: " + JSON.stringify(v2.body));
}
