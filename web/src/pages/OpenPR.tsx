// Open a pull request of a repository's changes through the GitHub
// integration: the branch is pushed by the coordinator, never the VM.
import { useState } from "preact/hooks";
import { call, enc } from "../api/client";
import type { TaskPR } from "../api/types";
import { Problem } from "../ui/Problem";

export function OpenPR(props: { taskId: string; path: string }) {
  const [repo, setRepo] = useState("");
  const [pr, setPR] = useState<TaskPR>();
  const [error, setError] = useState<Error>();
  const [busy, setBusy] = useState(false);
  const id = "pr-repo-" + props.path;
  const open = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      setPR(await call<TaskPR>("POST", "/v1/tasks/" + enc(props.taskId) + "/pr", { repo, path: props.path }));
    } catch (err) {
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="toolbar" onSubmit={open} noValidate data-testid="open-pr">
      <label for={id}>GitHub repository</label>
      <input id={id} placeholder="owner/name" value={repo} onInput={(e) => setRepo(e.currentTarget.value)} />
      <button type="submit" disabled={busy || repo === ""}>
        {busy ? "Pushing…" : "Open a pull request"}
      </button>
      {pr && (
        <span role="status">
          <a href={pr.url}>pull request #{pr.number}</a> from <code>{pr.branch}</code>
        </span>
      )}
      <Problem error={error} what="Could not open it" />
    </form>
  );
}
