// The conversation of a task, folded from its events: prompts, assistant
// text, tool calls with their results, questions, errors and turn ends.
import type { TaskEvent, TurnUsage } from "../api/types";

export type Item =
  | { kind: "prompt"; seq: number; text: string }
  | { kind: "text"; seq: number; text: string }
  | { kind: "tool"; seq: number; id: string; name: string; input: string; output?: string; isError?: boolean }
  | { kind: "question"; seq: number; text: string }
  | { kind: "error"; seq: number; text: string }
  | { kind: "idle"; seq: number; ms: number }
  | { kind: "usage"; seq: number; usage: TurnUsage }
  | { kind: "note"; seq: number; text: string };

export type Conversation = { items: Item[]; working: boolean; lastSeq: number; turn?: string };

export const empty: Conversation = { items: [], working: false, lastSeq: 0 };

type Data = Record<string, unknown>;
const str = (v: unknown) => (typeof v === "string" ? v : v === undefined ? "" : JSON.stringify(v, null, 2));

/** fold adds one event (in seq order; a repeated seq is ignored). */
export function fold(c: Conversation, e: TaskEvent): Conversation {
  if (e.seq <= c.lastSeq) return c;
  const d = (e.data ?? {}) as Data;
  const items = c.items.slice();
  let working = c.working;
  let turn = c.turn;
  const add = (i: Item) => items.push(i);
  switch (e.type) {
    case "prompt":
      add({ kind: "prompt", seq: e.seq, text: str(d.text) });
      working = true;
      break;
    case "run_started":
      working = true;
      turn = str(d.turn);
      break;
    case "assistant_text":
      add({ kind: "text", seq: e.seq, text: str(d.text) });
      break;
    case "tool_call":
      add({ kind: "tool", seq: e.seq, id: str(d.id), name: str(d.name), input: str(d.input) });
      break;
    case "tool_result": {
      const i = items.findIndex((x) => x.kind === "tool" && x.id === d.id && x.output === undefined);
      if (i >= 0) items[i] = { ...(items[i] as Extract<Item, { kind: "tool" }>), output: str(d.output), isError: d.is_error === true };
      else add({ kind: "tool", seq: e.seq, id: str(d.id), name: "result", input: "", output: str(d.output), isError: d.is_error === true });
      break;
    }
    case "question":
      add({ kind: "question", seq: e.seq, text: str(d.text) });
      break;
    case "error":
      add({ kind: "error", seq: e.seq, text: str(d.message) || str(d.kind) });
      break;
    case "setup_failed":
      add({ kind: "error", seq: e.seq, text: "Setup failed: " + (str(d.error) || str(d)) });
      working = false;
      break;
    case "usage":
      if (e.usage) add({ kind: "usage", seq: e.seq, usage: e.usage });
      break;
    case "idle":
      add({ kind: "idle", seq: e.seq, ms: Number(d.duration_ms ?? 0) });
      working = false;
      break;
    case "stopped":
      add({ kind: "note", seq: e.seq, text: "Task stopped." });
      working = false;
      break;
    case "repo_cloned":
      add({ kind: "note", seq: e.seq, text: "Cloned " + str(d.url) + " into /work/" + str(d.path) });
      break;
    case "file_changed":
      add({ kind: "note", seq: e.seq, text: str(d.change) + " " + str(d.path) });
      break;
    case "brokered":
      add({ kind: "note", seq: e.seq, text: "Credentials brokered for " + (Array.isArray(d.hosts) ? d.hosts.join(", ") : "") });
      break;
    default:
      break;
  }
  return { items, working, lastSeq: e.seq, turn };
}
