// The automation form's blocks: the tree as nested lists, each block with
// the fields of its kind, its branches (then, else, body) as lists of
// their own; blocks are added, moved and removed in place.
import { useState } from "preact/hooks";
import { blockKinds, fieldInfo, getIn, keyOf, newBlock, placeName, retype, taskIds, type Block, type BlockKind, type Place } from "../lib/automationDef";
import { FieldProblems } from "../ui/Field";
import { AutomationEnv } from "./AutomationEnv";
import { NumberAt, SelectAt, TextAt, fieldId, problemsOf, useForm } from "./automationFields";

const kindOptions = Object.entries(blockKinds).map(([k, v]) => [k, v.label + " (" + k + ")"] as [string, string]);

export function AutomationBlocks() {
  const { problems } = useForm();
  return (
    <fieldset>
      <legend>Blocks</legend>
      <p class="hint">They run in order; a block reads an earlier one's output as {"{{steps.ID.output}}"}.</p>
      <FieldProblems id="f-blocks-err" problems={problemsOf(problems, ["blocks"])} />
      <BlockList place={["blocks"]} name="the automation" />
    </fieldset>
  );
}

function BlockList(props: { place: Place; name: string }) {
  const { def, edit } = useForm();
  const blocks = (getIn(def, props.place) as Block[] | undefined) ?? [];
  const move = (i: number, d: number) => {
    const next = blocks.slice();
    [next[i], next[i + d]] = [next[i + d], next[i]];
    edit(props.place, next, true);
  };
  return (
    <div class="block-list" data-testid="block-list" data-place={placeName(props.place)}>
      {blocks.length > 0 && (
        <ol>
          {blocks.map((b, i) => (
            <li key={keyOf(b)}>
              <BlockCard
                place={[...props.place, i]}
                block={b}
                onUp={i > 0 ? () => move(i, -1) : undefined}
                onDown={i < blocks.length - 1 ? () => move(i, 1) : undefined}
                onRemove={() => edit(props.place, blocks.filter((_, j) => j !== i), true)}
              />
            </li>
          ))}
        </ol>
      )}
      <AddBlock place={props.place} name={props.name} blocks={blocks} />
    </div>
  );
}

function BlockCard(props: { place: Place; block: Block; onUp?: () => void; onDown?: () => void; onRemove: () => void }) {
  const { def, edit, problems } = useForm();
  const b = props.block;
  const kind = blockKinds[b.kind];
  const tasks = taskIds(def.blocks).filter((id) => id !== b.id);
  const name = b.id || "block " + placeName(props.place);
  const sid = fieldId(props.place) + "-name";
  return (
    <details open class="block" aria-labelledby={sid} data-testid="block" data-place={placeName(props.place)} data-block={b.id}>
      <summary id={sid}>
        <code>{b.id || "(no id)"}</code> {kind?.label ?? b.kind}
      </summary>
      <div class="block-head">
        <TextAt place={[...props.place, "id"]} label="Id" />
        <SelectAt place={[...props.place, "kind"]} label="Kind" options={kindOptions} onPick={(k) => edit(props.place, retype(b, k as BlockKind, def), true)} />
        <span class="block-tools">
          <button type="button" class="quiet" disabled={!props.onUp} onClick={props.onUp} aria-label={`Move ${name} up`}>↑</button>
          <button type="button" class="quiet" disabled={!props.onDown} onClick={props.onDown} aria-label={`Move ${name} down`}>↓</button>
          <button type="button" class="quiet danger" onClick={props.onRemove} aria-label={`Remove ${name}`}>Remove</button>
        </span>
      </div>
      <FieldProblems id={fieldId(props.place) + "-err"} problems={problemsOf(problems, props.place)} />
      {(kind?.fields ?? []).map((f) => {
        const place = [...props.place, f];
        const info = fieldInfo[f];
        if (f === "task") return <SelectAt place={place} label={info.label} hint={info.hint} blank="choose…" options={tasks.map((t) => [t, t])} />;
        if (f === "max") return <NumberAt place={place} label={info.label} />;
        return <TextAt place={place} label={info.label} hint={info.hint} multiline={info.multiline} />;
      })}
      {kind?.env && <AutomationEnv place={props.place} block={name} />}
      {(kind?.branches ?? []).map((br) => (
        <div class="branch" role="group" aria-label={`${b.id} ${br}`}>
          <p class="branch-name">{br}</p>
          <FieldProblems id={fieldId([...props.place, br]) + "-err"} problems={problemsOf(problems, [...props.place, br])} />
          <BlockList place={[...props.place, br]} name={`${b.id} ${br}`} />
        </div>
      ))}
    </details>
  );
}

function AddBlock(props: { place: Place; name: string; blocks: Block[] }) {
  const { def, edit } = useForm();
  const [kind, setKind] = useState<BlockKind>(props.blocks.length === 0 && props.place.length === 1 ? "start_task" : "send_prompt");
  const add = () => edit(props.place, [...props.blocks, newBlock(kind, def)], true);
  return (
    <div class="row inline add-block">
      <select aria-label={`Kind of block to add to ${props.name}`} value={kind} onChange={(e) => setKind(e.currentTarget.value as BlockKind)}>
        {kindOptions.map(([v, l]) => (
          <option value={v}>{l}</option>
        ))}
      </select>
      <button type="button" class="quiet" onClick={add} aria-label={`Add a block to ${props.name}`}>
        Add a block
      </button>
    </div>
  );
}
