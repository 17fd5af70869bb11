// A run_command block's environment as a table of names and values: each
// value a template, read by the command as "$NAME", so what came from
// outside reaches the shell as a variable, never as its text. A row shows
// the save's problems of its name (blocks[0].env.NAME).
import { useState } from "preact/hooks";
import { getIn, type Place } from "../lib/automationDef";
import { FieldProblems } from "../ui/Field";
import { RemoveCell, RowsHead, fieldId, problemsOf, useForm } from "./automationFields";

export function AutomationEnv(props: { place: Place; block: string }) {
  const { def, edit, problems } = useForm();
  const at = [...props.place, "env"];
  const rows = Object.entries((getIn(def, at) as Record<string, string> | undefined) ?? {});
  // taken holds a row's name while another row has it (an env cannot hold
  // both); the row keeps its old name until it is changed to a free one.
  const [taken, setTaken] = useState<Record<number, string>>({});
  const put = (next: [string, string][], structural = false) => edit(at, next.length > 0 ? Object.fromEntries(next) : undefined, structural);
  const rename = (i: number, name: string) => {
    const clash = rows.some(([n], j) => j !== i && n === name);
    setTaken(({ [i]: _, ...rest }) => (clash ? { ...rest, [i]: name } : rest));
    if (!clash) put(rows.map(([n, v], j) => (j === i ? [name, v] : [n, v])));
  };
  const remove = (i: number) => {
    setTaken({});
    put(rows.filter((_, j) => j !== i), true);
  };
  const tableErr = fieldId(at) + "-err";
  return (
    <div class="env" role="group" aria-labelledby={fieldId(at) + "-l"}>
      <span id={fieldId(at) + "-l"}>Environment</span>
      <p class="hint">Each value a template such as {"{{trigger.head_ref}}"}; the command reads it as "$NAME".</p>
      {rows.length > 0 && (
        <table class="inputs env-vars" data-testid="env-table">
          <RowsHead heads={["Name", "Value"]} />
          <tbody>
            {rows.map(([name, value], i) => {
              const probs = taken[i] !== undefined ? [`"${taken[i]}" is set in another row; choose another name`] : problemsOf(problems, [...at, name]);
              const err = fieldId([...at, i]) + "-err";
              const bad = probs.length > 0 ? { "aria-invalid": true, "aria-describedby": err } : {};
              return (
                <tr key={i} data-testid="env-row" data-name={name}>
                  <td data-label="Name">
                    <input {...bad} aria-label={`Variable ${i + 1} name`} spellcheck={false} value={taken[i] ?? name} onInput={(e) => rename(i, e.currentTarget.value)} />
                  </td>
                  <td data-label="Value">
                    <input {...bad} aria-label={`Variable ${i + 1} value`} spellcheck={false} value={value} onInput={(e) => put(rows.map(([n, v], j) => (j === i ? [n, e.currentTarget.value] : [n, v])))} />
                    <FieldProblems id={err} problems={probs} />
                  </td>
                  <RemoveCell label={`Remove variable ${i + 1}`} onRemove={() => remove(i)} />
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      <FieldProblems id={tableErr} problems={problemsOf(problems, at)} />
      <button type="button" class="quiet" disabled={rows.some(([n]) => n === "")} aria-label={`Add a variable to ${props.block}`} onClick={() => put([...rows, ["", ""]], true)}>
        Add a variable
      </button>
    </div>
  );
}
