// The automation editor: the definition as text (YAML or JSON), its
// problems with their places after a save, its inputs, a test run and
// its runs.
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, enc, get } from "../api/client";
import type { Automation, AutomationResponse, Builtin } from "../api/types";
import { definitionProblems } from "../lib/automationProblems";
import { templates } from "../lib/automationTemplates";
import { useLoad } from "../lib/useLoad";
import { navigate } from "../router";
import { Loading, Problem } from "../ui/Problem";
import { AutomationRuns } from "./AutomationRuns";
import { AutomationTestRun } from "./AutomationTestRun";

export function AutomationEditor(props: { name?: string }) {
  const existing = useLoad((s) => (props.name ? get<Automation>("/v1/automations/" + enc(props.name), s) : Promise.resolve(undefined)), [props.name]);
  const builtins = useLoad((s) => (props.name ? Promise.resolve({ builtins: [] as Builtin[] }) : get<{ builtins: Builtin[] }>("/v1/automation-builtins", s)), [props.name]);
  const starts = [
    ...templates,
    ...(builtins.value?.builtins ?? []).map((b) => ({ id: "builtin:" + b.name, label: "Built-in: " + b.name + " (" + b.integration + ")", text: b.definition })),
  ];
  const [text, setText] = useState(templates[0].text);
  const [enabled, setEnabled] = useState(false);
  const [error, setError] = useState<Error>();
  const [saving, setSaving] = useState(false);
  const [secret, setSecret] = useState<{ url: string; secret: string }>();

  useEffect(() => {
    if (existing.value) setText(JSON.stringify(existing.value.definition, null, 2));
  }, [existing.value]);

  const save = async (e: Event) => {
    e.preventDefault();
    setSaving(true);
    setError(undefined);
    try {
      const a = existing.value;
      const r = a
        ? await call<AutomationResponse>("PUT", "/v1/automations/" + enc(a.name), { definition: text, version: a.version })
        : await call<AutomationResponse>("POST", "/v1/automations", { definition: text, enabled });
      if (r.hook_secret) setSecret({ url: location.origin + (r.hook_url ?? ""), secret: r.hook_secret });
      existing.set(r);
      navigate("/automations/" + enc(r.name), true);
    } catch (err) {
      setError(err as Error);
    } finally {
      setSaving(false);
    }
  };
  const toggle = async () => {
    const a = existing.value;
    if (!a) return;
    try {
      existing.set(await call<Automation>("POST", "/v1/automations/" + enc(a.name) + (a.enabled ? "/disable" : "/enable")));
    } catch (err) {
      setError(err as Error);
    }
  };
  if (props.name && existing.loading && !existing.value) return <Loading what="the automation" />;
  const a = existing.value;
  const probs = error instanceof ApiError && error.status === 400 ? definitionProblems(error.message) : [];

  return (
    <>
      <div class="head">
        <h1 class="title">{a ? "Automation " + a.name : "New automation"}</h1>
        {a && (
          <button class="quiet" onClick={toggle} data-testid="automation-toggle">
            {a.enabled ? "Disable" : "Enable"} its trigger
          </button>
        )}
      </div>
      {a && (
        <p class="muted" data-testid="automation-summary">
          Version {a.version} · {a.trigger} trigger · {a.enabled ? "enabled" : "disabled"}
          {a.hook_url ? " · POST " + a.hook_url : ""}
        </p>
      )}
      {secret && (
        <div class="side" role="status" data-testid="hook-secret">
          <p>
            Deliveries go to <code>{secret.url}</code>, signed with this secret. It is shown this once:
          </p>
          <pre>{secret.secret}</pre>
        </div>
      )}
      <div class="split">
        <form class="editor" onSubmit={save} noValidate>
          {!a && (
            <div class="row">
              <label for="a-template">Start from</label>
              <select id="a-template" onChange={(e) => setText(starts.find((t) => t.id === e.currentTarget.value)?.text ?? text)}>
                {starts.map((t) => (
                  <option value={t.id}>{t.label}</option>
                ))}
              </select>
            </div>
          )}
          <div class={"row" + (probs.length ? " invalid" : "")}>
            <label for="a-def">Definition (YAML or JSON)</label>
            <textarea id="a-def" rows={18} spellcheck={false} value={text} onInput={(e) => setText(e.currentTarget.value)} aria-describedby="a-def-err" />
            <p class="hint">
              Templates: {"{{inputs.NAME}}"}, {"{{trigger.PATH}}"}, {"{{steps.ID.output}}"}. Each save is a new version; runs finish on theirs.
            </p>
            {probs.length > 0 && (
              <div role="alert" id="a-def-err" data-testid="definition-problems">
                <ul class="field-problems">
                  {probs.map((p) => (
                    <li>
                      {p.path && <code>{p.path}</code>} {p.msg}
                    </li>
                  ))}
                </ul>
              </div>
            )}
          </div>
          {!a && (
            <label class="check">
              <input type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.currentTarget.checked)} /> Enable its trigger
            </label>
          )}
          {!probs.length && <Problem error={error} what="Could not save" />}
          <button type="submit" disabled={saving}>
            {saving ? "Saving…" : a ? "Save a new version" : "Create automation"}
          </button>
        </form>
        <div class="side">{a ? <AutomationTestRun automation={a} /> : <p class="muted">Save it to run it.</p>}</div>
      </div>
      {a && <AutomationRuns name={a.name} />}
    </>
  );
}
