// Sessions: the list, by state and host, each with its task.
import { useState } from "preact/hooks";
import { enc, listAll, q } from "../api/client";
import type { Session } from "../api/types";
import { ago, short } from "../lib/format";
import { useChanges } from "../lib/useChanges";
import { useHostNames, useTasksBySession } from "../lib/names";
import { useLoad } from "../lib/useLoad";
import { Table } from "../ui/Table";
import { StateBadge } from "../ui/StateBadge";

const states = ["", "creating", "active", "suspending", "idle", "resuming", "deleting", "deleted", "failed", "lost"];

export function Sessions(props: { host?: string }) {
  const [state, setState] = useState("");
  const list = useLoad((s) => listAll<Session>("/v1/sessions" + q({ state, host: props.host }), s), [state, props.host]);
  useChanges(["sessions"], list.reload);
  const hostNames = useHostNames();
  const tasks = useTasksBySession([list.value]);
  const host = props.host ? (hostNames.get(props.host) ?? props.host.slice(0, 13)) : "";
  const sessions = [...(list.value?.items ?? [])].sort((a, b) => b.updated_at.localeCompare(a.updated_at));
  return (
    <>
      <h1>Sessions{host ? " on host " + host : ""}</h1>
      <div class="filters">
        <label>
          State
          <select value={state} onChange={(e) => setState(e.currentTarget.value)}>
            {states.map((s) => (
              <option value={s}>{s || "any"}</option>
            ))}
          </select>
        </label>
      </div>
      <Table
        what="sessions"
        rows={list.value ? sessions : undefined}
        loading={list.loading}
        error={list.error}
        testid="session-list"
        empty="No sessions."
        columns={[
          { head: "State", cell: (s) => <StateBadge state={s.state} label="Session" /> },
          {
            head: "Session",
            cell: (s) => (
              <a href={"/sessions/" + enc(s.id)}>
                <code>{short(s.id)}</code>
              </a>
            ),
          },
          {
            head: "Task",
            cell: (s) => {
              const t = tasks.get(s.id);
              return t ? <a href={"/tasks/" + enc(t.id)}>{t.title}</a> : "";
            },
          },
          { head: "Image", wide: true, cell: (s) => s.spec.image ?? "default" },
          { head: "Host", wide: true, cell: (s) => (s.host_id ? <a href={"/hosts/" + enc(s.host_id)}>{hostNames.get(s.host_id) ?? short(s.host_id)}</a> : "") },
          { head: "Last activity", cell: (s) => ago(s.last_activity ?? s.updated_at) },
        ]}
      />
    </>
  );
}
