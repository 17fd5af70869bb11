// Profile grants (who may start tasks with a profile) as the editor keeps
// them, and as the pages name them: "Everyone", "group: backend", a
// member's email.
import type { Grant, Member } from "../api/types";

/** Who is the editor's form of a profile's grants. */
export type Who = { everyone: boolean; users: string[]; groups: string[] };

/** everyone is a new profile's default in the form: the choice is shown,
 * not left to the API's default (only owners and admins). */
export const everyone: Who = { everyone: true, users: [], groups: [] };

export function toWho(grants: Grant[] | undefined): Who {
  const gs = grants ?? [];
  const subjects = (k: Grant["kind"]) => gs.filter((g) => g.kind === k && g.subject).map((g) => g.subject as string);
  return { everyone: gs.some((g) => g.kind === "everyone"), users: subjects("user"), groups: subjects("group") };
}

export function toGrants(w: Who): Grant[] {
  const out: Grant[] = w.everyone ? [{ kind: "everyone" }] : [];
  for (const u of new Set(w.users)) out.push({ kind: "user", subject: u });
  for (const g of new Set(w.groups)) out.push({ kind: "group", subject: g });
  return out;
}

/** memberName is how a page names a member: their email, else name, else id. */
export const memberName = (m: Member) => m.email || m.name || m.user_id;

/** Names maps user ids to how they are named: the members an admin reads,
 * and "you" for the reader. */
export type Names = { members: Member[]; me?: string };

/** nameOf names user id by email, "you" for the reader, else the id. */
export function nameOf(id: string, names: Names): string {
  const m = names.members.find((x) => x.user_id === id);
  if (m) return memberName(m);
  return id === names.me ? "you" : id;
}

/** grantLabels names each grant; no grants is "Admins only". A reader
 * who lists no members (not an admin) sees others as "another member". */
export function grantLabels(grants: Grant[] | undefined, names: Names): string[] {
  const gs = grants ?? [];
  if (gs.length === 0) return ["Admins only"];
  const user = (id: string) => {
    const n = nameOf(id, names);
    return n === id && names.members.length === 0 ? "another member" : n;
  };
  return gs.map((g) => (g.kind === "everyone" ? "Everyone" : g.kind === "group" ? "group: " + (g.subject ?? "") : "member: " + user(g.subject ?? "")));
}

/** groupProblem is what is wrong with a group name about to be added to
 * list, if anything (the server's bounds: 1 to 100 bytes, at most max). */
export function groupProblem(name: string, list: string[], max = 50): string | undefined {
  const n = name.trim();
  if (n === "") return "type a group's name";
  if (new TextEncoder().encode(n).length > 100) return "a group's name is at most 100 bytes";
  if (list.includes(n)) return n + " is already listed";
  if (list.length >= max) return "at most " + max + " groups";
  return undefined;
}
