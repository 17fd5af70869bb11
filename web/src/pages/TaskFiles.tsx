// The task's files: browse its session from /work, view a file, download
// it, upload one into the directory shown.
import { useState } from "preact/hooks";
import { enc, headers, q } from "../api/client";
import type { FileInfo } from "../api/types";
import { bytes } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { Loading, Problem } from "../ui/Problem";

const maxView = 256 << 10;

type Entry = { dir: FileInfo[] } | { file: string; truncated: boolean; path: string };

async function read(taskId: string, path: string, signal: AbortSignal): Promise<Entry> {
  const resp = await fetch("/v1/tasks/" + enc(taskId) + "/files" + q({ path }), { headers: headers(), signal });
  if (!resp.ok) throw new Error(((await resp.json().catch(() => ({}))) as { error?: string }).error ?? resp.statusText);
  if ((resp.headers.get("Content-Type") ?? "").includes("json")) return { dir: (await resp.json()) as FileInfo[] };
  const b = await resp.blob();
  return { file: await b.slice(0, maxView).text(), truncated: b.size > maxView, path };
}

export function TaskFiles(props: { taskId: string; sessionId?: string }) {
  const [path, setPath] = useState("/work");
  const [error, setError] = useState<Error>();
  const entry = useLoad((s) => read(props.taskId, path, s), [props.taskId, path]);
  const parent = path === "/" ? undefined : path.replace(/\/[^/]*$/, "") || "/";

  const download = async (p: string) => {
    const resp = await fetch("/v1/tasks/" + enc(props.taskId) + "/files" + q({ path: p }), { headers: headers() });
    if (!resp.ok) return setError(new Error("download " + p + ": " + resp.statusText));
    const url = URL.createObjectURL(await resp.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = p.split("/").pop() ?? "file";
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  const upload = async (files: FileList | null) => {
    if (!files || !props.sessionId) return;
    setError(undefined);
    for (const f of Array.from(files)) {
      const target = (path.endsWith("/") ? path : path + "/") + f.name;
      const resp = await fetch("/v1/sessions/" + enc(props.sessionId) + "/files" + q({ path: target, mode: "0644" }), {
        method: "PUT",
        headers: headers({ "Content-Type": "application/octet-stream" }),
        body: f,
      });
      if (!resp.ok) setError(new Error("upload " + f.name + ": " + resp.statusText));
    }
    entry.reload();
  };

  const v = entry.value;
  return (
    <div class="files">
      <div class="toolbar">
        <code aria-label="Current path">{path}</code>
        {parent !== undefined && (
          <button class="quiet" onClick={() => setPath(parent)}>
            Up
          </button>
        )}
        {v && "dir" in v && props.sessionId && (
          <label class="button quiet">
            Upload
            <input type="file" class="sr-only" multiple onChange={(e) => void upload(e.currentTarget.files)} />
          </label>
        )}
      </div>
      <Problem error={entry.error ?? error} />
      {entry.loading && !v && <Loading what={path} />}
      {v && "dir" in v && (
        <table class="grid">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Size</th>
              <th scope="col" class="wide">
                Mode
              </th>
            </tr>
          </thead>
          <tbody>
            {v.dir.map((f) => (
              <tr>
                <td>
                  <button class="link" onClick={() => setPath(f.path)}>
                    {f.name}
                    {f.is_dir ? "/" : ""}
                  </button>
                </td>
                <td>{f.is_dir ? "" : bytes(f.size)}</td>
                <td class="wide">
                  <code>{f.mode}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {v && "file" in v && (
        <>
          <div class="toolbar">
            <button class="quiet" onClick={() => void download(v.path)}>
              Download
            </button>
            {v.truncated && <span class="muted">Showing the first 256 KiB.</span>}
          </div>
          <pre class="file-view">{v.file}</pre>
        </>
      )}
    </div>
  );
}
