// Starting points for a new automation: a definition to edit, in YAML. A
// run_command's command takes no {{…}}: a value reaches it through env.
// Each names the profile it is given (one that exists), or asks for one.
export type Template = { id: string; label: string; text: string };

// PROFILE_WANTED stands where no profile exists yet: saving names the field.
export const PROFILE_WANTED = "";

export function templates(profile: string): Template[] {
  const p = JSON.stringify(profile || PROFILE_WANTED); // a YAML string, whatever the name
  return [
    {
      id: "webhook",
      label: "Webhook starts a task",
      text: `name: from-webhook
trigger: {kind: webhook, slug: from-webhook}
inputs:
  - {name: profile, type: string, default: ${p}}
blocks:
  - {id: task, kind: start_task, profile: "{{inputs.profile}}", prompt: "{{trigger.prompt}}"}
  - {id: idle, kind: wait_idle, task: task, timeout: 30m}
  - {id: stop, kind: end_session, task: task}
`,
    },
    {
      id: "nightly",
      label: "Nightly task on a schedule",
      text: `name: nightly
trigger: {kind: schedule, cron: "0 3 * * *", time_zone: UTC}
blocks:
  - {id: task, kind: start_task, profile: ${p}, prompt: "Run the test suite and fix what fails."}
  - {id: idle, kind: wait_idle, task: task, timeout: 2h}
  - {id: stop, kind: end_session, task: task}
`,
    },
    {
      id: "manual",
      label: "Run by hand with inputs",
      text: `name: by-hand
trigger: {kind: manual}
inputs:
  - {name: topic, type: string, required: true}
  - {name: passes, type: number, default: 1}
blocks:
  - {id: task, kind: start_task, profile: ${p}, prompt: "Work on {{inputs.topic}}."}
  - {id: idle, kind: wait_idle, task: task, timeout: 30m}
  - {id: check, kind: run_command, task: task, env: {TOPIC: "{{inputs.topic}}"}, command: 'echo "Worked on: $TOPIC"; ls /work'}
  - {id: stop, kind: end_session, task: task}
`,
    },
  ];
}
