// Sessions: the list, by state and host.
import { useState } from "preact/hooks";
import { enc, listAll, q } from "../api/client";
import type { Session } from "../api/types";
import { ago, short } from "../lib/format";
import { useChanges } from "../lib/useChanges";
import { useLoad } from "../lib/useLoad";
import { Loading, Problem } from "../ui/Problem";
import { StateBadge } from "../ui/StateBadge";

const states = ["", "creating", "active", "suspending", "idle", "resuming", "deleting", "deleted", "failed", "lost"];

export function Sessions(props: { host?: string }) {
  const [state, setState] = useState("");
  const list = useLoad((s) => listAll<"sessions", Session>("/v1/sessions" + q({ state, host: props.host }), "sessions", s), [state, props.host]);
  useChanges(["sessions"], list.reload);
  const sessions = [...(list.value?.sessions ?? [])].sort((a, b) => b.updated_at.localeCompare(a.updated_at));
  return (
    <>
      <h1>Sessions{props.host ? " on host " + props.host.slice(0, 13) : ""}</h1>
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
      <Problem error={list.error} what="Sessions" />
      {list.loading && !list.value ? (
        <Loading what="sessions" />
      ) : sessions.length === 0 ? (
        <p class="empty">No sessions.</p>
      ) : (
        <table class="grid" data-testid="session-list">
          <thead>
            <tr>
              <th scope="col">State</th>
              <th scope="col">Session</th>
              <th scope="col" class="wide">
                Image
              </th>
              <th scope="col" class="wide">
                Host
              </th>
              <th scope="col">Last activity</th>
            </tr>
          </thead>
          <tbody>
            {sessions.map((s) => (
              <tr>
                <td>
                  <StateBadge state={s.state} label="Session" />
                </td>
                <td>
                  <a href={"/sessions/" + enc(s.id)}>
                    <code>{short(s.id)}</code>
                  </a>
                </td>
                <td class="wide">{s.spec.image ?? "default"}</td>
                <td class="wide">{s.host_id ? <a href={"/hosts/" + enc(s.host_id)}>{short(s.host_id)}</a> : ""}</td>
                <td>{ago(s.last_activity ?? s.updated_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
