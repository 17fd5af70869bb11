// A labelled form row and the problems of its field.
import type { ComponentChildren } from "preact";

export function Row(props: { id: string; label: string; problems?: string[]; hint?: string; class?: string; children: ComponentChildren }) {
  return (
    <div class={"row" + (props.problems?.length ? " invalid" : "") + (props.class ? " " + props.class : "")}>
      <label for={props.id}>{props.label}</label>
      {props.children}
      {props.hint && <p class="hint">{props.hint}</p>}
      <FieldProblems id={props.id + "-err"} problems={props.problems} />
    </div>
  );
}

export function FieldProblems(props: { id: string; problems?: string[] }) {
  if (!props.problems?.length) return null;
  return (
    <div role="alert" id={props.id}>
      <ul class="field-problems">
        {props.problems.map((p) => (
          <li>{p}</li>
        ))}
      </ul>
    </div>
  );
}
