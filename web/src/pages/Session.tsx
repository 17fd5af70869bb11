// A session: state, host, ops, snapshots and lifecycle events live, a
// terminal, and suspend, resume and delete. Looking wakes nothing: all of
// it is read from the database when the change feed says the session
// changed; an idle session resumes only on Resume or in the Terminal tab.
import { useState } from "preact/hooks";
import { call, enc } from "../api/client";
import type { SessionEvent } from "../api/types";
import { ago, opKind, short } from "../lib/format";
import { useHostNames, useTasksBySession } from "../lib/names";
import { useTitle } from "../lib/title";
import { useSession } from "../lib/useSession";
import { navigate } from "../router";
import { Problem } from "../ui/Problem";
import { StateBadge } from "../ui/StateBadge";
import { Tabs } from "../ui/Tabs";
import { lazy } from "../ui/Lazy";

const Terminal = lazy(() => import("./Terminal").then((m) => m.Terminal), "the terminal");

const tabs = [
  { id: "overview", label: "Overview" },
  { id: "terminal", label: "Terminal" },
];

export function Session(props: { id: string; tab: string }) {
  const [events, setEvents] = useState<SessionEvent[]>([]);
  // outbox rows are the guest's messages, not lifecycle: they are not shown
  const live = useSession(props.id, (e) => e.type !== "outbox" && setEvents((es) => (es.some((x) => x.seq === e.seq) ? es : [e, ...es].slice(0, 200))));
  const [error, setError] = useState<Error>();
  const [busy, setBusy] = useState("");
  const s = live.session;
  const act = async (what: string, method: "POST" | "DELETE", path: string) => {
    setBusy(what);
    setError(undefined);
    try {
      await call(method, "/v1/sessions/" + enc(props.id) + path + "?wait=false");
      live.reload();
    } catch (e) {
      setError(e as Error);
    } finally {
      setBusy("");
    }
  };
  const tab = tabs.some((t) => t.id === props.tab) ? props.tab : "overview";
  const hostNames = useHostNames();
  const task = useTasksBySession([props.id]).get(props.id);
  useTitle(tab === "terminal" ? "Terminal" : undefined, "Session " + short(props.id));
  return (
    <>
      <div class="head">
        <h1 class="title">
          Session <code>{short(props.id)}</code>
        </h1>
        <div class="states">
          <StateBadge state={s?.state} label="Session" />
          <button onClick={() => act("suspend", "POST", "/suspend")} disabled={!!busy || s?.state !== "active"}>
            Suspend
          </button>
          <button onClick={() => act("resume", "POST", "/resume")} disabled={!!busy || s?.state !== "idle"}>
            Resume
          </button>
          <button class="danger" onClick={() => confirm("Delete this session and its snapshots?") && act("delete", "DELETE", "")} disabled={!!busy}>
            Delete
          </button>
        </div>
      </div>
      <Problem error={error ?? live.error} />
      {s?.state === "idle" && tab === "overview" && (
        <p class="muted" data-testid="suspended">
          Suspended: it holds no host and this page does not wake it. Resume it, or open the Terminal, to run it again.
        </p>
      )}
      <Tabs tabs={tabs} current={tab} onSelect={(t) => navigate("/sessions/" + enc(props.id) + (t === "overview" ? "" : "?tab=" + t), true)} />
      <div role="tabpanel" id={"panel-" + tab} aria-labelledby={"tab-" + tab}>
        {tab === "terminal" && <Terminal sessionId={props.id} />}
        {tab === "overview" && s && (
          <div class="cols">
            <section>
              <h2>Details</h2>
              <dl class="facts">
                <dt>Task</dt>
                <dd data-testid="session-task">{task ? <a href={"/tasks/" + enc(task.id)}>{task.title}</a> : "none"}</dd>
                <dt>Host</dt>
                <dd>{s.host_id ? <a href={"/hosts/" + enc(s.host_id)}>{hostNames.get(s.host_id) ?? short(s.host_id)}</a> : "none (idle sessions hold no host)"}</dd>
                <dt>Image</dt>
                <dd>{s.spec.image ?? "default"}</dd>
                <dt>Epoch</dt>
                <dd>{s.epoch}</dd>
                <dt>Last activity</dt>
                <dd>{ago(s.last_activity)}</dd>
                {s.reason && (
                  <>
                    <dt>Reason</dt>
                    <dd>{s.reason}</dd>
                  </>
                )}
              </dl>
              <h2>Snapshots</h2>
              {(s.snapshots ?? []).length === 0 ? (
                <p class="muted">None yet.</p>
              ) : (
                <ul>
                  {(s.snapshots ?? []).map((sn) => (
                    <li>
                      <code>{short(sn.id)}</code> {ago(sn.created_at)}
                    </li>
                  ))}
                </ul>
              )}
            </section>
            <section>
              <h2>Ops</h2>
              <table class="grid">
                <thead>
                  <tr>
                    <th scope="col">Kind</th>
                    <th scope="col">State</th>
                    <th scope="col">Epoch</th>
                    <th scope="col">When</th>
                  </tr>
                </thead>
                <tbody>
                  {[...(s.ops ?? [])].reverse().map((o) => (
                    <tr>
                      <td>{opKind(o.kind)}</td>
                      <td>
                        {o.state}
                        {o.error && <div class="problem small">{o.error}</div>}
                      </td>
                      <td>{o.epoch}</td>
                      <td>{ago(o.updated_at)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
              <h2>Live events</h2>
              <ol class="events" aria-live="polite">
                {events.map((e) => (
                  <li>
                    <code>{e.type}</code> {describe(e)} <span class="muted small">{ago(e.time)}</span>
                  </li>
                ))}
              </ol>
            </section>
          </div>
        )}
      </div>
    </>
  );
}

/** describe says what a lifecycle event did, for the ones that say. */
function describe(e: SessionEvent): string {
  const d = (e.data ?? {}) as Record<string, unknown>;
  if (e.type === "state" && typeof d.from === "string" && typeof d.to === "string") {
    return d.from + " → " + d.to + (typeof d.event === "string" ? " (" + d.event + ")" : "") + (typeof d.reason === "string" ? ": " + d.reason : "");
  }
  return "";
}
