// A unified diff split per file, each line typed (context, added,
// removed, hunk header).
export type DiffLine = { kind: "ctx" | "add" | "del" | "hunk" | "meta"; text: string };
export type FileDiff = { path: string; lines: DiffLine[]; added: number; removed: number };

export function splitDiff(diff: string): FileDiff[] {
  const files: FileDiff[] = [];
  let cur: FileDiff | undefined;
  for (const line of diff.split("\n")) {
    if (line.startsWith("diff --git ")) {
      const m = / b\/(.*)$/.exec(line);
      cur = { path: m ? m[1] : line.slice(11), lines: [], added: 0, removed: 0 };
      files.push(cur);
      continue;
    }
    if (!cur) continue;
    if (line.startsWith("@@")) cur.lines.push({ kind: "hunk", text: line });
    else if (line.startsWith("+++ ") || line.startsWith("--- ") || /^(index|new file|deleted file|similarity|rename|old mode|new mode|Binary)/.test(line))
      cur.lines.push({ kind: "meta", text: line });
    else if (line.startsWith("+")) {
      cur.lines.push({ kind: "add", text: line.slice(1) });
      cur.added++;
    } else if (line.startsWith("-")) {
      cur.lines.push({ kind: "del", text: line.slice(1) });
      cur.removed++;
    } else if (line.startsWith(" ")) cur.lines.push({ kind: "ctx", text: line.slice(1) });
  }
  return files;
}
