// The automation form's fields: each is bound to a place in the definition
// (edited through the form's context) and shows the save's problems there.
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { DefProblem } from "../lib/automationProblems";
import { getIn, placeName, type Definition, type Place } from "../lib/automationDef";
import { Row } from "../ui/Field";

// edit sets the value at place; structural says it adds, moves or removes
// items, so places the last save's problems name no longer hold.
export type FormState = { def: Definition; edit: (place: Place, value: unknown, structural?: boolean) => void; problems: DefProblem[] };

export const FormContext = createContext<FormState>({ def: { name: "", trigger: { kind: "manual" }, blocks: [] }, edit: () => undefined, problems: [] });

export const useForm = () => useContext(FormContext);

// problemsOf lists the problems of exactly a place.
export function problemsOf(problems: DefProblem[], place: Place): string[] {
  const name = placeName(place);
  return problems.filter((p) => p.path === name).map((p) => p.msg);
}

// problemsAt lists the problems of a place and of the items of a list there.
export function problemsAt(problems: DefProblem[], place: Place): string[] {
  const name = placeName(place);
  return problems.filter((p) => p.path === name || (p.path.startsWith(name + "[") && !p.path.slice(name.length).includes("."))).map((p) => p.msg);
}

export const fieldId = (place: Place) => "f-" + placeName(place).replace(/[^A-Za-z0-9]+/g, "-");

type FieldProps = { place: Place; label: string; hint?: string; multiline?: boolean; placeholder?: string };

// TextAt edits a text (template) field; an emptied one is left out.
export function TextAt(props: FieldProps) {
  const { def, edit, problems } = useForm();
  const id = fieldId(props.place);
  const v = getIn(def, props.place);
  const value = v === undefined || v === null ? "" : String(v);
  const input = (e: Event) => edit(props.place, (e.currentTarget as HTMLInputElement).value || undefined);
  return (
    <Row id={id} label={props.label} hint={props.hint} problems={problemsAt(problems, props.place)}>
      {props.multiline ? (
        <textarea id={id} rows={3} spellcheck={false} value={value} onInput={input} aria-describedby={id + "-err"} />
      ) : (
        <input id={id} value={value} onInput={input} placeholder={props.placeholder} aria-describedby={id + "-err"} />
      )}
    </Row>
  );
}

// NumberAt edits a whole number; what is not one is kept as typed, for the
// save to name. signed: it may be negative (a phone's digit pad has no -).
export function NumberAt(props: FieldProps & { signed?: boolean }) {
  const { def, edit, problems } = useForm();
  const id = fieldId(props.place);
  const v = getIn(def, props.place);
  const input = (e: Event) => {
    const t = (e.currentTarget as HTMLInputElement).value.trim();
    edit(props.place, t === "" ? undefined : /^-?\d+$/.test(t) ? parseInt(t, 10) : t);
  };
  return (
    <Row id={id} label={props.label} hint={props.hint} problems={problemsAt(problems, props.place)}>
      <input id={id} inputMode={props.signed ? "text" : "numeric"} value={v === undefined ? "" : String(v)} onInput={input} aria-describedby={id + "-err"} />
    </Row>
  );
}

// SelectAt picks one of options (value, label); blank, when given, leaves
// the field out; onPick, when given, makes the edit instead.
export function SelectAt(props: FieldProps & { options: [string, string][]; blank?: string; onPick?: (v: string) => void }) {
  const { def, edit, problems } = useForm();
  const id = fieldId(props.place);
  const value = String(getIn(def, props.place) ?? "");
  const options = value && !props.options.some(([v]) => v === value) ? [...props.options, [value, value] as [string, string]] : props.options;
  return (
    <Row id={id} label={props.label} hint={props.hint} problems={problemsAt(problems, props.place)}>
      <select id={id} value={value} onChange={(e) => (props.onPick ? props.onPick(e.currentTarget.value) : edit(props.place, e.currentTarget.value || undefined))} aria-describedby={id + "-err"}>
        {props.blank !== undefined && <option value="">{props.blank}</option>}
        {options.map(([v, l]) => (
          <option value={v}>{l}</option>
        ))}
      </select>
    </Row>
  );
}

// ListAt edits a list of names, one per line.
export function ListAt(props: FieldProps) {
  const { def, edit, problems } = useForm();
  const id = fieldId(props.place);
  const v = getIn(def, props.place);
  const value = Array.isArray(v) ? v.join("\n") : "";
  const input = (e: Event) => {
    const items = (e.currentTarget as HTMLTextAreaElement).value.split(/[\n,]/).map((s) => s.trim());
    edit(props.place, items.some(Boolean) ? items.filter(Boolean) : undefined);
  };
  return (
    <Row id={id} label={props.label} hint={props.hint} problems={problemsAt(problems, props.place)}>
      <textarea id={id} rows={2} spellcheck={false} value={value} onChange={input} placeholder={props.placeholder} aria-describedby={id + "-err"} />
    </Row>
  );
}

// RowsHead is the head of a table of rows (inputs, a command's env): its
// columns, then one for the rows' Remove buttons (RemoveCell).
export function RowsHead(props: { heads: string[] }) {
  return (
    <thead>
      <tr>
        {props.heads.map((h) => (
          <th>{h}</th>
        ))}
        <th>
          <span class="sr-only">Remove</span>
        </th>
      </tr>
    </thead>
  );
}

// RemoveCell is a row's last cell: its Remove button.
export function RemoveCell(props: { label: string; onRemove: () => void }) {
  return (
    <td>
      <button type="button" class="quiet danger" aria-label={props.label} onClick={props.onRemove}>
        Remove
      </button>
    </td>
  );
}
