// The automation form: a definition's name, trigger, inputs, blocks and
// settings as fields, each showing the save's problems at its place.
import type { DefProblem } from "../lib/automationProblems";
import { defaultMinAuthor, minAuthors, prEvents, setIn, triggerKinds, type Definition, type Place, type TriggerKind } from "../lib/automationDef";
import { AutomationBlocks } from "./AutomationBlocks";
import { AutomationInputs } from "./AutomationInputs";
import { FormContext, ListAt, NumberAt, SelectAt, TextAt, problemsAt, useForm } from "./automationFields";
import { FieldProblems } from "../ui/Field";

export function AutomationForm(props: { def: Definition; onChange: (d: Definition, structural: boolean) => void; problems: DefProblem[]; fixedName?: boolean }) {
  const edit = (place: Place, value: unknown, structural = false) => props.onChange(setIn(props.def, place, value), structural);
  // Enter in a field does not save: a save is the button's.
  const noEnter = (e: KeyboardEvent) => {
    if (e.key === "Enter" && (e.target as HTMLElement).tagName === "INPUT") e.preventDefault();
  };
  return (
    <FormContext.Provider value={{ def: props.def, edit, problems: props.problems }}>
      <div class="automation-form" data-testid="automation-form" onKeyDown={noEnter}>
        {!props.fixedName && <TextAt place={["name"]} label="Name" hint="a-z, 0-9 and -; the automation's name in URLs and the CLI" />}
        <TriggerFields />
        <AutomationInputs />
        <AutomationBlocks />
        <fieldset>
          <legend>When runs overlap</legend>
          <TextAt place={["settings", "concurrency_key"]} label="Concurrency key" hint="A template, e.g. {{trigger.repo}}#{{trigger.number}}; empty: runs never wait" />
          <SelectAt
            place={["settings", "policy"]}
            label="Policy"
            blank="queue (the default)"
            options={[
              ["supersede", "supersede: cancel the running one"],
              ["skip", "skip: do not run"],
            ]}
          />
        </fieldset>
        <fieldset>
          <legend>How many its triggers start</legend>
          <p class="hint">Over a cap a delivery is recorded as a skipped run, saying which; runs started by hand are not capped.</p>
          <NumberAt place={["settings", "max_concurrent"]} label="At most at once" signed hint="Empty or 0: 10; -1: no cap; at most 10000" />
          <NumberAt place={["settings", "max_per_hour"]} label="At most per hour" signed hint="Empty or 0: 120; -1: no cap; at most 10000" />
        </fieldset>
      </div>
    </FormContext.Provider>
  );
}

function TriggerFields() {
  const { def, edit, problems } = useForm();
  const t = def.trigger;
  const events = t.events ?? [];
  return (
    <fieldset>
      <legend>Trigger</legend>
      <SelectAt place={["trigger", "kind"]} label="Started by" options={Object.entries(triggerKinds)} onPick={(kind) => edit(["trigger"], { kind: kind as TriggerKind }, true)} />
      {t.kind === "schedule" && (
        <>
          <TextAt place={["trigger", "cron"]} label="Cron schedule" hint="Five fields: minute hour day month weekday, e.g. 0 3 * * 1-5" />
          <TextAt place={["trigger", "time_zone"]} label="Time zone" hint="An IANA name such as Europe/Paris; empty: UTC" />
        </>
      )}
      {t.kind === "webhook" && <TextAt place={["trigger", "slug"]} label="Hook slug" hint="Deliveries go to POST /v1/hooks/SLUG, signed with the secret shown once at save" />}
      {t.kind === "slack_mention" && <ListAt place={["trigger", "channels"]} label="Channels" hint="Channel ids, one per line; none: every channel" />}
      {t.kind === "github_pr" && (
        <>
          <ListAt place={["trigger", "repos"]} label="Repositories" hint="owner/name, one per line" />
          <div role="group" aria-labelledby="f-trigger-events-l">
            <span id="f-trigger-events-l">Events</span> <span class="hint">(none checked: all)</span>
            {prEvents.map((ev) => (
              <label class="check">
                <input type="checkbox" checked={events.includes(ev)} onChange={(e) => edit(["trigger", "events"], e.currentTarget.checked ? [...events, ev] : events.filter((x) => x !== ev))} /> {ev}
              </label>
            ))}
            <FieldProblems id="f-trigger-events-err" problems={problemsAt(problems, ["trigger", "events"])} />
          </div>
          <SelectAt
            place={["trigger", "min_author"]}
            label="Authors who start runs"
            hint="The lowest GitHub author association (of a pull request's author, or of an @engrams comment's) that starts runs; below it a delivery is recorded as a refused run"
            blank={`${defaultMinAuthor} (the default)`}
            options={minAuthors}
          />
        </>
      )}
      {t.kind === "linear_issue" && <ListAt place={["trigger", "labels"]} label="Labels" hint="One per line; none: an issue created starts a run" />}
    </fieldset>
  );
}
