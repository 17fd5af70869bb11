// Which form field a profile problem concerns, by how the server words it
// ("image …", "harness …", "egress …", "repos[0] …", "env …").
const fields = ["name", "image", "harness", "model", "mode", "egress", "repos", "env", "credentials", "skills", "apps", "idle_timeout_s"] as const;
export type Field = (typeof fields)[number] | "other";

export function fieldOf(problem: string): Field {
  const head = problem.toLowerCase().split(/[\s:[(]/, 1)[0];
  for (const f of fields) if (head === f || head.startsWith(f) || (f === "repos" && head.startsWith("repo"))) return f;
  if (head.startsWith("credential")) return "credentials";
  return "other";
}

export function byField(problems: string[]): Map<Field, string[]> {
  const m = new Map<Field, string[]>();
  for (const p of problems) {
    const f = fieldOf(p);
    m.set(f, [...(m.get(f) ?? []), p]);
  }
  return m;
}
