// Hosts (for operators): state, backend and acceleration, capacity bars,
// sessions, last heartbeat, and drain (undrain).
import { useEffect, useState } from "preact/hooks";
import { enc, listAll, post } from "../api/client";
import type { Host } from "../api/types";
import { ago } from "../lib/format";
import { useChanges } from "../lib/useChanges";
import { useLoad } from "../lib/useLoad";
import { Loading, Problem } from "../ui/Problem";
import { StateBadge } from "../ui/StateBadge";

export function Hosts() {
  const list = useLoad((s) => listAll<Host>("/v1/hosts", s), []);
  const [error, setError] = useState<Error>();
  useChanges(["hosts", "sessions"], list.reload);
  useEffect(() => {
    const t = setInterval(list.reload, 5000); // heartbeats and capacity change without a notification
    return () => clearInterval(t);
  }, [list.reload]);
  const hosts = list.value?.items ?? [];
  return (
    <>
      <h1>Hosts</h1>
      <Problem error={list.error ?? error} what="Hosts" />
      {list.loading && !list.value ? (
        <Loading what="hosts" />
      ) : hosts.length === 0 ? (
        <p class="empty">
          No hosts. Add one with <code>engrams host create NAME</code>, then run <code>engrams host run</code> on it.
        </p>
      ) : (
        <div class="cards" data-testid="host-list">
          {hosts.map((h) => (
            <article class="card" aria-label={"Host " + h.name}>
              <header>
                <h2>{h.name}</h2>
                <StateBadge state={h.state} label="Host" />
              </header>
              <p class="muted small">
                {h.facts.backend.name} · {h.facts.backend.acceleration} · {h.facts.backend.isolation ? "isolated VMs" : "no isolation"} · {h.facts.arch}
              </p>
              <Bar label="Memory" used={h.capacity.used_memory_mib} total={h.capacity.memory_mib} unit="MiB" />
              <Bar label="vCPUs" used={h.capacity.used_vcpus} total={h.capacity.vcpus} unit="" />
              {h.capacity.max_sessions > 0 ? (
                <Bar label="Sessions" used={h.capacity.sessions} total={h.capacity.max_sessions} unit="" />
              ) : (
                <p class="small">Sessions {h.capacity.sessions} (no set limit)</p>
              )}
              <p class="small">
                Last heartbeat {h.last_heartbeat.startsWith("0001") ? "never" : ago(h.last_heartbeat)}
                {" · "}
                <a href={"/sessions?host=" + enc(h.id)}>sessions</a>
              </p>
              {h.state !== "disabled" && h.state !== "deleted" && !h.draining && (
                <button class="quiet" onClick={() => post("/v1/hosts/" + enc(h.id) + "/drain").then(list.reload, setError)}>
                  Drain
                </button>
              )}
              {h.state !== "deleted" && h.draining && (
                <button class="quiet" onClick={() => post("/v1/hosts/" + enc(h.id) + "/undrain").then(list.reload, setError)}>
                  Undrain
                </button>
              )}
            </article>
          ))}
        </div>
      )}
    </>
  );
}

function Bar(props: { label: string; used: number; total: number; unit: string }) {
  const pct = props.total > 0 ? Math.round((100 * props.used) / props.total) : 0;
  return (
    <div class="bar">
      <span>
        {props.label} {props.used}/{props.total} {props.unit}
      </span>
      <meter min={0} max={props.total || 1} value={props.used} aria-label={props.label + " used, " + pct + "%"} />
    </div>
  );
}
