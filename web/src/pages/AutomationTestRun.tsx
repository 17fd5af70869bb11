// A test run: a field per input of the saved definition (typed), and a
// sample trigger payload; the run opens on its timeline.
import { useState } from "preact/hooks";
import { call, enc } from "../api/client";
import type { Automation, AutomationInput, RunResponse } from "../api/types";
import { navigate } from "../router";
import { Problem } from "../ui/Problem";

function value(input: AutomationInput, raw: string): unknown {
  if (raw === "") return undefined;
  if (input.type === "number") return Number(raw);
  if (input.type === "boolean") return raw === "true";
  if (input.type === "json") return JSON.parse(raw);
  return raw;
}

export function AutomationTestRun(props: { automation: Automation }) {
  const inputs = props.automation.definition.inputs ?? [];
  const [vals, setVals] = useState<Record<string, string>>({});
  const [payload, setPayload] = useState("{}");
  const [error, setError] = useState<Error>();
  const [busy, setBusy] = useState(false);
  const run = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const given: Record<string, unknown> = {};
      for (const i of inputs) {
        const v = value(i, vals[i.name] ?? "");
        if (v !== undefined) given[i.name] = v;
      }
      const r = await call<RunResponse>("POST", "/v1/automations/" + enc(props.automation.name) + "/runs", { inputs: given, trigger: JSON.parse(payload || "{}") });
      navigate("/runs/" + enc(r.id));
    } catch (err) {
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="editor" onSubmit={run} noValidate data-testid="test-run">
      <h2>Test run</h2>
      {inputs.length === 0 && <p class="muted small">It takes no inputs.</p>}
      {inputs.map((i) => (
        <div class="row">
          <label for={"in-" + i.name}>
            {i.name} <span class="muted small">({i.type}{i.required ? ", required" : ""})</span>
          </label>
          {i.type === "boolean" ? (
            <select id={"in-" + i.name} value={vals[i.name] ?? ""} onChange={(e) => setVals({ ...vals, [i.name]: e.currentTarget.value })}>
              <option value="">default ({String(i.default ?? "none")})</option>
              <option value="true">true</option>
              <option value="false">false</option>
            </select>
          ) : (
            <input
              id={"in-" + i.name}
              inputMode={i.type === "number" ? "decimal" : undefined}
              placeholder={i.default !== undefined ? "default: " + JSON.stringify(i.default) : ""}
              value={vals[i.name] ?? ""}
              onInput={(e) => setVals({ ...vals, [i.name]: e.currentTarget.value })}
            />
          )}
        </div>
      ))}
      <div class="row">
        <label for="a-payload">Sample trigger payload (JSON)</label>
        <textarea id="a-payload" rows={4} spellcheck={false} value={payload} onInput={(e) => setPayload(e.currentTarget.value)} />
      </div>
      <Problem error={error} what="Could not start" />
      <button type="submit" disabled={busy}>
        {busy ? "Starting…" : "Start a test run"}
      </button>
    </form>
  );
}
