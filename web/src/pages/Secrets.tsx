// Secrets: names, kinds and who uses them (never their values), adding
// and deleting.
import { useState } from "preact/hooks";
import { del, enc, listAll, post } from "../api/client";
import type { Secret } from "../api/types";
import { ago } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";

const kinds = ["anthropic_api_key", "openai_api_key", "git_https", "github_app", "generic"];

export function Secrets() {
  const list = useLoad((s) => listAll<Secret>("/v1/secrets", s), []);
  const [name, setName] = useState("");
  const [kind, setKind] = useState(kinds[0]);
  const [value, setValue] = useState("");
  const [baseURL, setBaseURL] = useState("");
  const [error, setError] = useState<Error>();
  const add = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      await post("/v1/secrets", { name, kind, value, meta: baseURL ? { base_url: baseURL } : {} });
      setName("");
      setValue("");
      list.reload();
    } catch (err) {
      setError(err as Error);
    }
  };
  return (
    <>
      <h1>Secrets</h1>
      <form class="editor" onSubmit={add}>
        <div class="row inline">
          <label for="s-name">Name</label>
          <input id="s-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required />
          <label for="s-kind">Kind</label>
          <select id="s-kind" value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
            {kinds.map((k) => (
              <option value={k}>{k}</option>
            ))}
          </select>
        </div>
        <div class="row">
          <label for="s-value">Value</label>
          <input id="s-value" type="password" autocomplete="off" value={value} onInput={(e) => setValue(e.currentTarget.value)} required />
          <p class="hint">Sealed at rest; never shown again.</p>
        </div>
        <div class="row">
          <label for="s-base">Base URL</label>
          <input id="s-base" value={baseURL} onInput={(e) => setBaseURL(e.currentTarget.value)} placeholder="the provider's API" />
        </div>
        <Problem error={error} what="Could not add" />
        <button type="submit">Add secret</button>
      </form>
      <Table
        what="secrets"
        rows={list.value?.items}
        loading={list.loading}
        error={list.error}
        empty="No secrets yet."
        columns={[
          { head: "Name", cell: (s) => s.name },
          { head: "Kind", cell: (s) => s.kind },
          { head: "Used by", wide: true, cell: (s) => (s.used_by ?? []).join(", ") },
          { head: "Added", cell: (s) => ago(s.created_at) },
          {
            head: "Actions",
            hidden: true,
            cell: (s) => (
              <button class="quiet danger" onClick={() => confirm("Delete secret " + s.name + "?") && del("/v1/secrets/" + enc(s.name)).then(list.reload, setError)}>
                Delete
              </button>
            ),
          },
        ]}
      />
    </>
  );
}
