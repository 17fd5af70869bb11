// The automation form's inputs: a table of typed parameters (name, type,
// default, required), each row edited in place.
import type { AutomationInput } from "../api/types";
import { FieldProblems } from "../ui/Field";
import { keyOf } from "../lib/automationDef";
import { RemoveCell, RowsHead, useForm } from "./automationFields";

const types: AutomationInput["type"][] = ["string", "number", "boolean", "json"];

// defaultOf reads a typed default from what was typed; what does not parse
// is kept as typed, for the save to name.
function defaultOf(type: AutomationInput["type"], t: string): unknown {
  if (t === "") return undefined;
  if (type === "number" && t.trim() !== "" && !Number.isNaN(Number(t))) return Number(t);
  if (type === "boolean" && (t === "true" || t === "false")) return t === "true";
  if (type === "json") {
    try {
      return JSON.parse(t);
    } catch {
      return t;
    }
  }
  return t;
}

const shown = (v: unknown) => (v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v));

export function AutomationInputs() {
  const { def, edit, problems } = useForm();
  const inputs = def.inputs ?? [];
  const set = (i: number, x: AutomationInput) => edit(["inputs"], inputs.map((y, j) => (j === i ? x : y)));
  const probs = problems.filter((p) => p.path === "inputs" || p.path.startsWith("inputs[")).map((p) => p.path + ": " + p.msg);
  // a cell with a problem is marked and points at the list under the table
  const cell = (i: number, f: string) =>
    problems.some((p) => p.path === `inputs[${i}].${f}`) ? { "aria-invalid": true, "aria-describedby": "f-inputs-err" } : {};
  return (
    <fieldset>
      <legend>Inputs</legend>
      {inputs.length === 0 && <p class="muted small">No inputs. Templates read them as {"{{inputs.NAME}}"}.</p>}
      {inputs.length > 0 && (
        <table class="inputs" data-testid="input-table">
          <RowsHead heads={["Name", "Type", "Default", "Required"]} />
          <tbody>
            {inputs.map((x, i) => (
              <tr key={keyOf(x)}>
                <td data-label="Name">
                  <input {...cell(i, "name")} aria-label={`Input ${i + 1} name`} value={x.name} onInput={(e) => set(i, { ...x, name: e.currentTarget.value })} />
                </td>
                <td data-label="Type">
                  <select {...cell(i, "type")} aria-label={`Input ${i + 1} type`} value={x.type} onChange={(e) => set(i, { ...x, type: e.currentTarget.value as AutomationInput["type"], default: undefined })}>
                    {types.map((t) => (
                      <option value={t}>{t}</option>
                    ))}
                  </select>
                </td>
                <td data-label="Default">
                  <input {...cell(i, "default")} aria-label={`Input ${i + 1} default`} value={shown(x.default)} placeholder={x.type === "json" ? "JSON" : ""} onChange={(e) => set(i, { ...x, default: defaultOf(x.type, e.currentTarget.value) })} />
                </td>
                <td data-label="Required">
                  <input type="checkbox" {...cell(i, "required")} aria-label={`Input ${i + 1} required`} checked={!!x.required} onChange={(e) => set(i, { ...x, required: e.currentTarget.checked || undefined })} />
                </td>
                <RemoveCell label={`Remove input ${i + 1}`} onRemove={() => edit(["inputs"], inputs.filter((_, j) => j !== i), true)} />
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <FieldProblems id="f-inputs-err" problems={probs} />
      <button type="button" class="quiet" onClick={() => edit(["inputs"], [...inputs, { name: "", type: "string" }], true)}>
        Add an input
      </button>
    </fieldset>
  );
}
