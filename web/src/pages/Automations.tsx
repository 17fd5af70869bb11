// Automations: the list.
import { enc, listAll } from "../api/client";
import type { Automation } from "../api/types";
import { ago } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { Table } from "../ui/Table";
import { isAdmin, useMe } from "../lib/useMe";

export function Automations() {
  const list = useLoad((s) => listAll<Automation>("/v1/automations", s), []);
  const as = list.value?.items ?? [];
  const admin = isAdmin(useMe());
  return (
    <>
      <div class="head">
        <h1>Automations</h1>
        {admin && (
          <a class="button" href="/automations/new">
            New automation
          </a>
        )}
      </div>
      <Table
        what="automations"
        rows={list.value ? as : undefined}
        loading={list.loading}
        error={list.error}
        testid="automation-list"
        empty={
          <>
            No automations yet. An automation turns repeat work into runs started by a schedule, a webhook or by hand. {admin ? <a href="/automations/new">Make one</a> : "An admin makes them"}.
          </>
        }
        columns={[
          { head: "Name", cell: (a) => <a href={"/automations/" + enc(a.name)}>{a.name}</a> },
          { head: "Trigger", cell: (a) => a.trigger },
          { head: "Enabled", cell: (a) => (a.enabled ? "on" : "off") },
          { head: "Version", wide: true, cell: (a) => a.version },
          { head: "Changed", wide: true, cell: (a) => ago(a.updated_at) },
        ]}
      />
    </>
  );
}
