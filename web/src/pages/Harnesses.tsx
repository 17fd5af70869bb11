// Harnesses: the registered bundles, and building a built-in one.
import { useState } from "preact/hooks";
import { del, enc, headers, listAll, post } from "../api/client";
import type { Harness } from "../api/types";
import { ago, bytes } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";
import { isFleet, useMe } from "../lib/useMe";

export function Harnesses() {
  const list = useLoad((s) => listAll<Harness>("/v1/harnesses", s), []);
  const fleet = isFleet(useMe()); // harness bundles are the deployment's: fleet operators install them
  const [name, setName] = useState("claude-code");
  const [version, setVersion] = useState("");
  const [error, setError] = useState<Error>();
  const [busy, setBusy] = useState(false);
  const build = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await post("/v1/harnesses/build", version ? { name, version } : { name });
      list.reload();
    } catch (err) {
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  };
  const upload = async (files: FileList | null) => {
    const f = files?.[0];
    if (!f) return;
    setBusy(true);
    setError(undefined);
    try {
      const resp = await fetch("/v1/harnesses", {
        method: "POST",
        headers: headers({ "Content-Type": f.name.endsWith(".tar") ? "application/x-tar" : "application/gzip" }),
        body: f,
      });
      if (!resp.ok) throw new Error(((await resp.json().catch(() => ({}))) as { error?: string }).error ?? resp.statusText);
      list.reload();
    } catch (err) {
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <h1>Harnesses</h1>
      {fleet && (
        <>
          <p class="small muted">
            Add your own: a .tar.gz (or .tar) of a directory holding its harness.json.{" "}
            <label class="button quiet">
              Add a harness…
              <input type="file" class="sr-only" accept=".tar,.tgz,.gz,application/gzip,application/x-tar" onChange={(e) => void upload(e.currentTarget.files)} />
            </label>
          </p>
          <form class="inline-form" onSubmit={build}>
            <label for="h-name">Build</label>
            <select id="h-name" value={name} onChange={(e) => setName(e.currentTarget.value)}>
              <option value="claude-code">claude-code</option>
              <option value="codex">codex</option>
              <option value="shell">shell</option>
            </select>
            <label for="h-version">Version</label>
            <input id="h-version" value={version} onInput={(e) => setVersion(e.currentTarget.value)} placeholder="latest" />
            <button type="submit" disabled={busy}>
              {busy ? "Building… (may take minutes)" : "Build"}
            </button>
          </form>
        </>
      )}
      <Problem error={error} />
      <Table
        what="harnesses"
        rows={list.value?.items}
        loading={list.loading}
        error={list.error}
        empty="No harnesses yet: build one above."
        columns={[
          { head: "Name", cell: (h) => h.name },
          { head: "Version", cell: (h) => h.version },
          { head: "Models", wide: true, cell: (h) => h.models.join(", ") },
          { head: "Size", wide: true, cell: (h) => bytes(h.size_bytes) },
          { head: "Added", cell: (h) => ago(h.created_at) },
          {
            head: "Actions",
            hidden: true,
            cell: (h) =>
              fleet && (
                <button
                  class="quiet danger"
                  aria-label={"Delete " + h.name + "@" + h.version}
                  onClick={() =>
                    confirm("Delete " + h.name + "@" + h.version + "? Sessions made with it keep it.") &&
                    del("/v1/harnesses/" + enc(h.name) + "?version=" + enc(h.version)).then(list.reload, setError)
                  }
                >
                  Delete
                </button>
              ),
          },
        ]}
      />
    </>
  );
}
