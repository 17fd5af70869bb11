// A definition's problems as the server words them: "automation NAME: PATH: MSG",
// or "automation NAME has N problems:" and a "  - PATH: MSG" line each.
export type DefProblem = { path: string; msg: string };

export function definitionProblems(message: string): DefProblem[] {
  const body = message.replace(/^invalid request: /, "");
  const lines = body.includes("\n") ? body.split("\n").slice(1) : [body.replace(/^automation [^:]*: /, "")];
  return lines
    .map((l) => l.replace(/^\s*-\s*/, "").trim())
    .filter((l) => l !== "")
    .map((l) => {
      const i = l.indexOf(": ");
      return i > 0 ? { path: l.slice(0, i), msg: l.slice(i + 2) } : { path: "", msg: l };
    });
}
