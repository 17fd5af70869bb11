// toolSubject is what a tool call acts on, for its one-line summary: the
// file it writes, the command it runs, the pattern or address it looks
// for ("" when its input names none). Harnesses pass tool input as JSON.
const keys = ["file_path", "path", "notebook_path", "command", "cmd", "pattern", "url", "query", "description"];

export function toolSubject(input: string): string {
  let v: unknown;
  try {
    v = JSON.parse(input);
  } catch {
    return "";
  }
  if (!v || typeof v !== "object") return "";
  const o = v as Record<string, unknown>;
  for (const k of keys) {
    const x = o[k];
    if (typeof x === "string" && x.trim()) return oneLine(x);
    if (Array.isArray(x) && x.every((p) => typeof p === "string") && x.length > 0) return oneLine(x.join(" "));
  }
  return "";
}

function oneLine(s: string): string {
  const first = s.trim().split("\n")[0];
  return first.length > 120 ? first.slice(0, 119) + "…" : first + (s.trim().includes("\n") ? " …" : "");
}
