// An automation definition as the form edits it: read from and written to
// YAML or JSON text, the fields each block kind uses, and edits of the
// block tree by place (the server's problem paths, e.g. blocks[2].then[0]).
import { parse, stringify } from "yaml";
import type { AutomationBlock, AutomationDefinition, AutomationTrigger } from "../api/types";

export type Definition = AutomationDefinition;
export type Block = AutomationBlock;
export type BlockKind = Block["kind"];
export type TriggerKind = AutomationTrigger["kind"];
export type Place = (string | number)[];

// The text fields a block kind uses, in the order the form shows them.
export type BlockField = "profile" | "task" | "prompt" | "command" | "path" | "content" | "channel" | "repo" | "number" | "issue" | "title" | "ref" | "text" | "timeout" | "if" | "while" | "max";
export type Branch = "then" | "else" | "body";

// env marks the kind that takes an environment (a table of NAME: template).
export const blockKinds: Record<BlockKind, { label: string; fields: BlockField[]; branches?: Branch[]; env?: boolean }> = {
  start_task: { label: "Start a task", fields: ["profile", "prompt"] },
  send_prompt: { label: "Send a prompt", fields: ["task", "prompt"] },
  wait_idle: { label: "Wait for the agent to go idle", fields: ["task", "timeout"] },
  run_command: { label: "Run a command", fields: ["task", "command"], env: true },
  read_file: { label: "Read a file", fields: ["task", "path"] },
  write_file: { label: "Write a file", fields: ["task", "path", "content"] },
  condition: { label: "Condition", fields: ["if"], branches: ["then", "else"] },
  loop: { label: "Loop", fields: ["max", "while"], branches: ["body"] },
  post_slack: { label: "Post to Slack", fields: ["channel", "text"] },
  github_comment: { label: "Comment on GitHub", fields: ["repo", "number", "text"] },
  github_review: { label: "Review on GitHub", fields: ["repo", "number", "text"] },
  open_pr: { label: "Open a pull request", fields: ["task", "repo", "title"] },
  github_file: { label: "Read a file from GitHub", fields: ["repo", "ref", "path"] },
  linear_comment: { label: "Comment on Linear", fields: ["issue", "text"] },
  end_session: { label: "End the session", fields: ["task"] },
};

export const fieldInfo: Record<BlockField, { label: string; hint?: string; multiline?: boolean }> = {
  profile: { label: "Profile" },
  task: { label: "Task", hint: "The start_task block whose task this acts on" },
  prompt: { label: "Prompt", multiline: true },
  command: { label: "Command", hint: 'Shell text, no {{…}}: values come from the environment below, as "$NAME"' },
  path: { label: "Path" },
  content: { label: "Content", multiline: true },
  channel: { label: "Channel" },
  repo: { label: "Repository", hint: "owner/name" },
  number: { label: "Number", hint: "The pull request or issue number" },
  issue: { label: "Issue" },
  title: { label: "Title" },
  ref: { label: "Ref", hint: "A branch, tag or commit; empty: the default branch" },
  text: { label: "Text", multiline: true },
  timeout: { label: "Timeout", hint: "A duration such as 30m" },
  if: { label: "If", hint: "True unless it renders empty, 0 or false" },
  while: { label: "While", hint: "Checked before each pass; empty: always" },
  max: { label: "At most (passes)" },
};

export const triggerKinds: Record<TriggerKind, string> = {
  manual: "By hand (dashboard or CLI)",
  schedule: "On a schedule",
  webhook: "A signed webhook",
  slack_mention: "A Slack mention",
  github_pr: "A GitHub pull request",
  linear_issue: "A Linear issue",
};

export const prEvents = ["opened", "synchronize", "reopened", "review_requested", "comment"];

// minAuthors are a github_pr trigger's floors (GitHub's author
// associations, highest first), each with who it lets start runs.
export const minAuthors: [string, string][] = [
  ["owner", "owner: the owner only"],
  ["member", "member: its organization's members and up"],
  ["collaborator", "collaborator: collaborators and up"],
  ["contributor", "contributor: anyone with a commit in it"],
  ["first_time_contributor", "first_time_contributor: also newcomers to it"],
  ["first_timer", "first_timer: also newcomers to GitHub"],
  ["none", "none: anyone"],
];
export const defaultMinAuthor = "collaborator";

const known: Record<string, string[]> = {
  definition: ["name", "trigger", "inputs", "blocks", "settings"],
  trigger: ["kind", "cron", "time_zone", "slug", "channels", "repos", "events", "labels", "min_author"],
  input: ["name", "type", "default", "required"],
  block: ["id", "kind", ...Object.keys(fieldInfo), "env", "then", "else", "body"],
  settings: ["concurrency_key", "policy", "max_concurrent", "max_per_hour"],
};

// parseDefinition reads YAML or JSON text as the server does: a text field
// keeps what was typed (ref: 1.10 is "1.10", not 1.1, and so does an env
// value); only numbers, required and defaults take YAML's types. It throws, naming the place, on what the
// form cannot show (it would drop it).
export function parseDefinition(text: string): Definition {
  const raw: unknown = parse(text, { schema: "failsafe" }); // every scalar as typed
  if (!isObject(raw)) throw new Error("the text is not a definition (a mapping of name, trigger, blocks)");
  only(raw, known.definition, "");
  if (raw.trigger !== undefined) only(raw.trigger, known.trigger, "trigger");
  if (raw.settings !== undefined) only(raw.settings, known.settings, "settings");
  list(raw.inputs, "inputs").forEach((x, i) => only(x, known.input, `inputs[${i}]`));
  const blocks = (bs: unknown, at: string) =>
    list(bs, at).forEach((b, i) => {
      const kind = isObject(b) ? blockKinds[b.kind as BlockKind] : undefined;
      only(b, kind ? ["id", "kind", ...kind.fields, ...(kind.env ? ["env"] : []), ...(kind.branches ?? [])] : known.block, `${at}[${i}]`);
      if (kind?.env && isObject(b)) envOf(b.env, `${at}[${i}].env`);
      for (const br of kind?.branches ?? []) if (isObject(b) && b[br] !== undefined) blocks(b[br], `${at}[${i}].${br}`);
    });
  blocks(raw.blocks, "blocks");
  const def = typedAs(raw, parse(text), "") as Definition;
  const rawInputs = list(raw.inputs, "inputs") as Record<string, unknown>[];
  (def.inputs ?? []).forEach((x, i) => {
    if (x.type === "string" && x.default !== undefined && typeof x.default !== "string" && typeof rawInputs[i]?.default === "string") x.default = rawInputs[i].default; // as typed
  });
  return { ...def, name: def.name ?? "", trigger: def.trigger ?? { kind: "manual" }, blocks: def.blocks ?? [] };
}

// envOf checks an env is a mapping of names to text (the form's table).
function envOf(v: unknown, at: string) {
  if (v === undefined || v === "") return;
  if (!isObject(v)) throw new Error(`${at}: want a mapping of NAME: value; edit it as text`);
  for (const [k, x] of Object.entries(v)) if (typeof x !== "string") throw new Error(`${at}.${k}: want a text value; edit it as text`);
}

const yes = ["true", "yes", "on", "y"];
const numbers = ["max", "max_concurrent", "max_per_hour"];
const no = ["false", "no", "off", "n"];

// typedAs walks raw (strings) beside typed (YAML's types): nulls go, the
// numbers and required take their type, a default is taken whole, an env
// as typed (an empty value is "").
function typedAs(raw: unknown, typed: unknown, key: string): unknown {
  if (key === "env") return isObject(raw) ? raw : undefined;
  if (typed === null || typed === undefined) return undefined;
  if (key === "default") return typed;
  if (key === "required" && typeof raw === "string") return yes.includes(raw.toLowerCase()) ? true : no.includes(raw.toLowerCase()) ? false : raw;
  if (numbers.includes(key)) return typeof typed === "number" ? typed : raw;
  if (Array.isArray(raw)) return raw.map((r, i) => typedAs(r, Array.isArray(typed) ? typed[i] : undefined, key));
  if (!isObject(raw)) return raw;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(raw)) {
    const t = typedAs(v, isObject(typed) ? typed[k] : undefined, k);
    if (t !== undefined) out[k] = t;
  }
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function only(v: unknown, keys: string[], at: string) {
  if (!isObject(v)) throw new Error(`${at || "the definition"}: want a mapping`);
  for (const k of Object.keys(v)) if (!keys.includes(k)) throw new Error(`${at ? at + "." : ""}${k}: the form has no such field${isObject(v) && v.kind ? " for " + v.kind : ""}; edit it as text`);
}

function list(v: unknown, at: string): unknown[] {
  if (v === undefined || v === null || v === "") return [];
  if (!Array.isArray(v)) throw new Error(`${at}: want a list`);
  return v;
}

// definitionText writes d as YAML, leaving out empty fields.
export function definitionText(d: Definition): string {
  return stringify(prune(d), { lineWidth: 0 });
}

function prune(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(prune);
  if (!isObject(v)) return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    if (k === "default" || k === "env") {
      if (x !== undefined && (k === "default" || Object.keys(x as object).length > 0)) out[k] = x; // "", [] and {} are defaults too; an env value may be ""
      continue;
    }
    const p = prune(x);
    if (p === undefined || p === "" || (Array.isArray(p) && p.length === 0) || (isObject(p) && Object.keys(p).length === 0)) continue;
    if (k === "required" && p === false) continue;
    out[k] = p;
  }
  return out;
}

// placeName is a place as the server names it: blocks[2].then[0].prompt.
export function placeName(place: Place): string {
  return place.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : "." + p)).join("");
}

export function getIn(v: unknown, place: Place): unknown {
  return place.reduce<unknown>((x, k) => (x as Record<string | number, unknown> | undefined)?.[k], v);
}

// setIn returns v with the value at place replaced, copying what it passes
// (a list where the place's key is an index).
export function setIn<T>(v: T, place: Place, value: unknown): T {
  if (place.length === 0) return value as T;
  const [k, ...rest] = place;
  const base = (v ?? (typeof k === "number" ? [] : {})) as Record<string | number, unknown>;
  const next = setIn(base[k], rest, value);
  if (Array.isArray(base)) {
    const copy = base.slice();
    copy[k as number] = next;
    return copy as T;
  }
  return { ...base, [k]: next } as T;
}

// keyOf is a key for an item of a list that stays with it as the list is
// edited: a hidden (symbol) property, carried by the copies setIn makes and
// left out of JSON and YAML.
const uid = Symbol("uid");
let uids = 0;
export function keyOf(o: object): number {
  const r = o as { [uid]?: number };
  r[uid] ??= ++uids;
  return r[uid];
}

// blockIds lists every block id of the tree; taskIds those of start_task blocks.
export function blockIds(bs: Block[] = []): string[] {
  return bs.flatMap((b) => [b.id, ...blockIds(b.then), ...blockIds(b.else), ...blockIds(b.body)]);
}

export function taskIds(bs: Block[] = []): string[] {
  return bs.flatMap((b) => [...(b.kind === "start_task" ? [b.id] : []), ...taskIds(b.then), ...taskIds(b.else), ...taskIds(b.body)]);
}

// newBlock is a block of kind with an id not yet taken, acting on the first
// task when its kind acts on one.
export function newBlock(kind: BlockKind, d: Definition): Block {
  const taken = new Set(blockIds(d.blocks));
  const base = kind === "start_task" ? "task" : kind.replace(/_/g, "-");
  let id = base;
  for (let n = 2; taken.has(id); n++) id = base + n;
  const b: Block = { id, kind };
  if (blockKinds[kind].fields.includes("task")) b.task = taskIds(d.blocks)[0] ?? "";
  if (kind === "loop") b.max = 3;
  return b;
}

// retype gives b another kind, keeping the fields both kinds use and
// giving a new one's defaults (a loop's bound, the first task).
export function retype(b: Block, kind: BlockKind, d: Definition): Block {
  const keep = new Set<string>([...blockKinds[kind].fields, ...(blockKinds[kind].branches ?? []), ...(blockKinds[kind].env ? ["env"] : [])]);
  const out: Record<string | symbol, unknown> = { ...newBlock(kind, d), id: b.id };
  for (const [k, v] of Object.entries(b)) if (keep.has(k)) out[k] = v;
  out[uid] = keyOf(b);
  return out as Block;
}
