// The task's changes: a unified diff per file, syntax highlighted.
import { enc, get } from "../api/client";
import type { TaskDiff } from "../api/types";
import { splitDiff } from "../lib/diff";
import { highlight, languageOf } from "../lib/highlight";
import { useLoad } from "../lib/useLoad";
import { Loading, Problem } from "../ui/Problem";
import { OpenPR } from "./OpenPR";

export function TaskChanges(props: { taskId: string }) {
  const diff = useLoad((s) => get<TaskDiff>("/v1/tasks/" + enc(props.taskId) + "/diff", s), [props.taskId]);
  if (diff.loading && !diff.value) return <Loading what="changes (an idle session resumes)" />;
  const repos = diff.value?.repos ?? [];
  return (
    <div class="changes">
      <div class="toolbar">
        <button class="quiet" onClick={diff.reload}>
          Refresh
        </button>
      </div>
      <Problem error={diff.error} what="Changes" />
      {repos.length === 0 && <p class="empty">This task has no repository; its files are in the Files tab.</p>}
      {repos.map((r) => {
        const files = splitDiff(r.diff);
        return (
          <section aria-label={"Repository " + r.path}>
            <h2>
              /work/{r.path} <span class="muted small">since {r.base.slice(0, 10)}</span>
            </h2>
            {files.length === 0 ? <p class="empty">No changes.</p> : <OpenPR taskId={props.taskId} path={r.path} />}
            {files.map((f) => {
              const lang = languageOf(f.path);
              return (
                <details open class="file-diff" data-testid="file-diff">
                  <summary>
                    <code>{f.path}</code> <span class="add">+{f.added}</span> <span class="del">−{f.removed}</span>
                  </summary>
                  <pre class="diff">
                    {f.lines
                      .filter((l) => l.kind !== "meta")
                      .map((l) => (
                        <div class={"line " + l.kind}>
                          <span class="sign" aria-hidden="true">
                            {l.kind === "add" ? "+" : l.kind === "del" ? "-" : l.kind === "hunk" ? "" : " "}
                          </span>
                          {l.kind === "hunk" ? <span>{l.text}</span> : <span dangerouslySetInnerHTML={{ __html: highlight(l.text, lang) }} />}
                        </div>
                      ))}
                  </pre>
                </details>
              );
            })}
          </section>
        );
      })}
    </div>
  );
}
