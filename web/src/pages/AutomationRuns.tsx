// An automation's runs, newest first, re-read every few seconds.
import { useEffect } from "preact/hooks";
import { enc, get, type Page } from "../api/client";
import type { Run } from "../api/types";
import { ago } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { StateBadge } from "../ui/StateBadge";
import { Table } from "../ui/Table";

export function took(r: { started_at?: string; ended_at?: string }): string {
  if (!r.started_at || !r.ended_at) return "";
  const ms = Date.parse(r.ended_at) - Date.parse(r.started_at);
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

export function AutomationRuns(props: { name: string }) {
  const runs = useLoad((s) => get<Page<Run>>("/v1/automations/" + enc(props.name) + "/runs?limit=50", s), [props.name]);
  useEffect(() => {
    const t = setInterval(runs.reload, 3000);
    return () => clearInterval(t);
  }, [runs.reload]);
  return (
    <>
      <h2>Runs</h2>
      <Table
        what="runs"
        rows={runs.value?.items}
        loading={runs.loading}
        error={runs.error}
        testid="run-list"
        empty="No runs yet."
        columns={[
          { head: "Run", cell: (r) => <a href={"/runs/" + enc(r.id)}>{ago(r.created_at)}</a> },
          { head: "State", cell: (r) => <StateBadge state={r.state} label="Run" /> },
          { head: "Trigger", cell: (r) => r.trigger },
          { head: "Version", wide: true, cell: (r) => r.version },
          { head: "Took", wide: true, cell: (r) => took(r) },
          { head: "Error", wide: true, cell: (r) => r.error ?? "" },
        ]}
      />
    </>
  );
}
