// Settings: the integrations (Slack, GitHub, Linear) and a form to
// configure one; credentials are sent once and never shown again.
import { useState } from "preact/hooks";
import { call, get, type Page } from "../api/client";
import type { Integration } from "../api/types";
import { ago } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";

const credentials: Record<string, string[]> = {
  slack: ["bot_token", "signing_secret", "app_token"],
  github: ["token", "webhook_secret", "private_key"],
  linear: ["api_key", "webhook_secret"],
};

export function Settings() {
  const list = useLoad((s) => get<Page<Integration>>("/v1/integrations", s), []);
  const [kind, setKind] = useState("slack");
  const [secrets, setSecrets] = useState<Record<string, string>>({});
  const [config, setConfig] = useState("{}");
  const [error, setError] = useState<Error>();
  const [done, setDone] = useState<string>();
  const add = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setDone(undefined);
    try {
      const given = Object.fromEntries(Object.entries(secrets).filter(([, v]) => v !== ""));
      const r = await call<Integration>("POST", "/v1/integrations", { kind, secrets: given, config: JSON.parse(config || "{}") });
      setSecrets({});
      setDone("Configured " + r.kind + (r.builtins?.length ? "; installed, disabled: " + r.builtins.join(", ") : "") + ".");
      list.reload();
    } catch (err) {
      setError(err as Error);
    }
  };
  return (
    <>
      <h1>Settings</h1>
      <h2>Integrations</h2>
      <Table
        what="integrations"
        rows={list.value?.items}
        loading={list.loading}
        error={list.error}
        testid="integration-list"
        empty="No integration yet: add Slack, GitHub or Linear below."
        columns={[
          { head: "Service", cell: (i) => i.kind },
          { head: "Credentials", cell: (i) => i.secrets.join(", ") },
          { head: "Settings", wide: true, cell: (i) => <code>{JSON.stringify(i.config)}</code> },
          { head: "Changed", wide: true, cell: (i) => ago(i.updated_at) },
        ]}
      />
      <form class="editor" onSubmit={add} noValidate data-testid="integration-form">
        <h2>Add or replace an integration</h2>
        <div class="row">
          <label for="i-kind">Service</label>
          <select id="i-kind" value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
            <option value="slack">Slack</option>
            <option value="github">GitHub</option>
            <option value="linear">Linear</option>
          </select>
        </div>
        {credentials[kind].map((c) => (
          <div class="row">
            <label for={"i-" + c}>{c}</label>
            <input id={"i-" + c} type="password" autocomplete="off" value={secrets[c] ?? ""} onInput={(e) => setSecrets({ ...secrets, [c]: e.currentTarget.value })} />
          </div>
        ))}
        <div class="row">
          <label for="i-config">Settings (JSON)</label>
          <textarea id="i-config" rows={3} spellcheck={false} value={config} onInput={(e) => setConfig(e.currentTarget.value)} />
          <p class="hint">Slack: channels (channel id → profile), default_profile, socket_mode. GitHub: repos, app_id, installation_id. Linear: profile.</p>
        </div>
        <Problem error={error} what="Could not save" />
        {done && <p role="status">{done}</p>}
        <button type="submit">Save</button>
      </form>
    </>
  );
}
