// A list of names edited in place: each with a Remove button, and a field
// to add one (Enter or the Add button). Names are shown as text.
import { useState } from "preact/hooks";
import { FieldProblems } from "./Field";

export function NameList(props: {
  id: string;
  what: string; // "group": names the field and the buttons
  names: string[];
  onChange: (names: string[]) => void;
  problem?: (name: string, names: string[]) => string | undefined;
  empty?: string;
}) {
  const [text, setText] = useState("");
  const [problem, setProblem] = useState<string>();
  const add = () => {
    const p = props.problem?.(text, props.names) ?? (text.trim() === "" ? "type a name" : undefined);
    setProblem(p);
    if (p) return;
    props.onChange([...props.names, text.trim()]);
    setText("");
  };
  return (
    <div class="name-list">
      {props.names.length === 0 ? (
        props.empty && <p class="muted small">{props.empty}</p>
      ) : (
        <ul class="names" aria-label={props.what + "s"}>
          {props.names.map((n) => (
            <li>
              <span class="name">{n}</span>
              <button type="button" class="quiet danger small" aria-label={`Remove ${props.what} ${n}`} onClick={() => props.onChange(props.names.filter((x) => x !== n))}>
                Remove
              </button>
            </li>
          ))}
        </ul>
      )}
      <div class="inline-form">
        <label class="sr-only" for={props.id}>
          {"New " + props.what}
        </label>
        <input
          id={props.id}
          value={text}
          placeholder={props.what + " name"}
          aria-invalid={problem ? true : undefined}
          aria-describedby={problem ? props.id + "-err" : undefined}
          onInput={(e) => setText(e.currentTarget.value)}
          onKeyDown={(e) => {
            if (e.key === "Enter") {
              e.preventDefault(); // adds the name; does not submit the form around it
              add();
            }
          }}
        />
        <button type="button" class="quiet" onClick={add}>
          {"Add " + props.what}
        </button>
      </div>
      <FieldProblems id={props.id + "-err"} problems={problem ? [problem] : undefined} />
    </div>
  );
}
