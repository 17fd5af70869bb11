// The automation editor: the definition as a form or as text (YAML or
// JSON), either way its problems with their places after a save; then a
// test run with its inputs, and its runs.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, call, enc, get, listAll, type Page } from "../api/client";
import type { Automation, AutomationResponse, Builtin, Profile } from "../api/types";
import { definitionText, parseDefinition, type Definition } from "../lib/automationDef";
import { definitionProblems } from "../lib/automationProblems";
import { templates } from "../lib/automationTemplates";
import { useTitle } from "../lib/title";
import { useLoad } from "../lib/useLoad";
import { navigate } from "../router";
import { Loading, Problem } from "../ui/Problem";
import { Tabs } from "../ui/Tabs";
import { AutomationForm } from "./AutomationForm";
import { AutomationRuns } from "./AutomationRuns";
import { AutomationTestRun } from "./AutomationTestRun";
import { isAdmin, useMe } from "../lib/useMe";

export function AutomationEditor(props: { name?: string }) {
  const admin = isAdmin(useMe());
  const existing = useLoad((s) => (props.name ? get<Automation>("/v1/automations/" + enc(props.name), s) : Promise.resolve(undefined)), [props.name]);
  const builtins = useLoad((s) => (props.name ? Promise.resolve({ items: [] as Builtin[], next_cursor: "" }) : get<Page<Builtin>>("/v1/automation-builtins", s)), [props.name]);
  // A new automation's templates name a profile that exists (the first), or
  // none, and the page asks for one.
  const profiles = useLoad((s) => (props.name ? Promise.resolve(undefined) : listAll<Profile>("/v1/profiles", s)), [props.name]);
  const profile = profiles.value?.items[0]?.name ?? "";
  const starts = [
    ...templates(profile),
    ...(builtins.value?.items ?? []).map((b) => ({ id: "builtin:" + b.name, label: "Built-in: " + b.name + " (" + b.integration + ")", text: b.definition })),
  ];
  useTitle(props.name ? "Automation " + props.name : "New automation");
  const [mode, setMode] = useState<"form" | "text">("form");
  const [startID, setStartID] = useState(templates("")[0].id);
  const [text, setText] = useState(templates("")[0].text);
  const [def, setDef] = useState<Definition>(() => parseDefinition(templates("")[0].text));
  const edited = useRef(false); // by hand: a template no longer replaces it
  const [modeError, setModeError] = useState<string>();
  const [enabled, setEnabled] = useState(false);
  const [error, setError] = useState<Error>();
  const [saving, setSaving] = useState(false);
  const [secret, setSecret] = useState<{ url: string; secret: string }>();

  useEffect(() => {
    if (!existing.value) return;
    setDef(existing.value.definition);
    setText(definitionText(existing.value.definition));
  }, [existing.value]);

  // The profiles arrive after the first render: a template not yet edited
  // is filled again with the profile's name.
  useEffect(() => {
    if (!props.name && !edited.current) pick(startID);
  }, [profile]);

  // The form edits def, the text tab text; switching carries one into the
  // other, and text the form cannot show keeps the text tab.
  const switchTo = (m: string) => {
    if (m === mode) return;
    try {
      if (m === "form") setDef(parseDefinition(text));
      else setText(definitionText(def));
      setMode(m === "form" ? "form" : "text");
      setModeError(undefined);
    } catch (err) {
      setModeError("The form cannot show this text: " + (err as Error).message);
    }
  };
  const pick = (id: string) => {
    const t = starts.find((x) => x.id === id)?.text;
    if (t === undefined) return;
    setStartID(id);
    edited.current = false;
    setText(t);
    try {
      setDef(parseDefinition(t));
    } catch {
      setMode("text");
    }
  };

  const save = async (e: Event) => {
    e.preventDefault();
    setSaving(true);
    setError(undefined);
    try {
      const a = existing.value;
      const definition = mode === "form" ? JSON.stringify(def) : text;
      const r = a
        ? await call<AutomationResponse>("PUT", "/v1/automations/" + enc(a.name), { definition, version: a.version })
        : await call<AutomationResponse>("POST", "/v1/automations", { definition, enabled });
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
  if (!props.name && profiles.loading && !profiles.value) return <Loading what="profiles" />;
  const a = existing.value;
  const probs = error instanceof ApiError && error.status === 400 ? definitionProblems(error.message) : [];

  return (
    <>
      <div class="head">
        <h1 class="title">{a ? "Automation " + a.name : "New automation"}</h1>
        {a && admin && (
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
              <select id="a-template" value={startID} onChange={(e) => pick(e.currentTarget.value)}>
                {starts.map((t) => (
                  <option value={t.id}>{t.label}</option>
                ))}
              </select>
            </div>
          )}
          {!a && profiles.value && !profile && (
            <p class="hint" data-testid="no-profile">
              A task runs on a profile, and there is none yet: <a href="/profiles/new">make one</a>, then name it in the start_task block.
            </p>
          )}
          <Tabs
            tabs={[
              { id: "form", label: "Form" },
              { id: "text", label: "Text (YAML or JSON)" },
            ]}
            current={mode}
            onSelect={switchTo}
          />
          {modeError && (
            <p role="alert" class="field-problems" data-testid="mode-problem">
              {modeError}
            </p>
          )}
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
          <div role="tabpanel" id={"panel-" + mode} aria-labelledby={"tab-" + mode}>
            {mode === "form" ? (
              <AutomationForm
                def={def}
                onChange={(d, structural) => {
                  edited.current = true;
                  setDef(d);
                  if (structural) setError(undefined);
                }}
                problems={probs}
                fixedName={!!a}
              />
            ) : (
              <div class={"row" + (probs.length ? " invalid" : "")}>
                <label for="a-def">Definition (YAML or JSON)</label>
                <textarea id="a-def" rows={18} spellcheck={false} value={text} onInput={(e) => {
                    edited.current = true;
                    setText(e.currentTarget.value);
                  }} aria-describedby="a-def-err" />
              </div>
            )}
            <p class="hint">
              Templates: {"{{inputs.NAME}}"}, {"{{trigger.PATH}}"}, {"{{steps.ID.output}}"}. Each save is a new version; runs finish on theirs.
            </p>
          </div>
          {!a && (
            <label class="check">
              <input type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.currentTarget.checked)} /> Enable its trigger
            </label>
          )}
          {!probs.length && <Problem error={error} what="Could not save" />}
          {admin ? (
            <button type="submit" disabled={saving}>
              {saving ? "Saving…" : a ? "Save a new version" : "Create automation"}
            </button>
          ) : (
            <p class="hint">Only admins change automations.</p>
          )}
        </form>
        <div class="side">{a ? <AutomationTestRun automation={a} /> : <p class="muted">Save it to run it.</p>}</div>
      </div>
      {a && <AutomationRuns name={a.name} />}
    </>
  );
}
