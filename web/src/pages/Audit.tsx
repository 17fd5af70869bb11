// The audit log (admins): who did what to what, how it answered, from
// where and when; newest first, a page at a time (Load more follows the
// API's next_cursor; ?limit= sets the page's size). What the API says is
// shown as text.
import { useEffect, useState } from "preact/hooks";
import { get, listAll, q } from "../api/client";
import type { AuditEvent, AuditList, Token } from "../api/types";
import { ago } from "../lib/format";
import { nameOf, type Names } from "../lib/grants";
import { useTitle } from "../lib/title";
import { useLoad } from "../lib/useLoad";
import { isAdmin, useMe } from "../lib/useMe";
import { useMembers } from "../lib/useMembers";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";

const defaultSize = 50;

/** pageSize is the ?limit= asked for, within the API's 1 to 500. */
function pageSize(limit?: string): number {
  const n = Number(limit);
  return Number.isInteger(n) && n >= 1 && n <= 500 ? n : defaultSize;
}

const at = (iso: string) => {
  const d = new Date(iso);
  return isNaN(d.getTime()) ? iso : d.toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "medium" });
};

function actor(e: AuditEvent) {
  return (
    <>
      {e.actor_name || e.actor_id}
      {e.actor_kind !== "user" && <span class="muted small"> ({e.actor_kind === "key" ? "service key" : e.actor_kind})</span>}
    </>
  );
}

/** target names what e was done to: a member or user by email, a key the
 * organisation still has by its name, else by its id. */
function target(e: AuditEvent, names: Names, keys: Token[]): string {
  if (!e.target_id) return e.target_kind ?? "";
  let id = e.target_id;
  if (e.target_kind === "member" || e.target_kind === "user") id = nameOf(id, names);
  if (e.target_kind === "key") id = keys.find((k) => k.id === id)?.name ?? id;
  return (e.target_kind ? e.target_kind + " " : "") + id;
}

export function Audit(props: { limit?: string }) {
  const me = useMe();
  const admin = isAdmin(me);
  const members = useMembers(admin);
  const keys = useLoad((s) => (admin ? listAll<Token>("/v1/tokens", s) : Promise.resolve(undefined)), [admin]);
  const size = pageSize(props.limit);
  const first = useLoad((s) => (admin ? get<AuditList>("/v1/audit" + q({ limit: size }), s) : Promise.resolve(undefined)), [admin, size]);
  const [more, setMore] = useState<AuditEvent[]>([]);
  const [cursor, setCursor] = useState<string>(); // the last page read's next_cursor; undefined: the first page's
  const [error, setError] = useState<Error>();
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    setMore([]);
    setCursor(undefined);
  }, [first.value]);
  useTitle("Audit log");
  const next = cursor ?? first.value?.next_cursor ?? "";
  const loadMore = async () => {
    setBusy(true);
    setError(undefined);
    try {
      const page = await get<AuditList>("/v1/audit" + q({ limit: size, cursor: next }));
      setMore((m) => [...m, ...page.items]);
      setCursor(page.next_cursor);
    } catch (err) {
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  };
  if (me && !admin)
    return (
      <>
        <h1>Audit log</h1>
        <p class="empty">The audit log is for the organisation's admins.</p>
      </>
    );
  const names = { members: members.value?.items ?? [], me: me?.user_id };
  const rows = first.value ? [...first.value.items, ...more] : undefined;
  return (
    <>
      <div class="head">
        <h1>Audit log</h1>
        <button type="button" class="quiet" onClick={first.reload} disabled={first.loading}>
          Refresh
        </button>
      </div>
      <p class="hint">What was done in the organisation, newest first: who, what, to what, the answer, from where and when.</p>
      <Table
        what="the audit log"
        rows={rows}
        loading={!me || first.loading}
        error={first.error}
        testid="audit-list"
        empty="Nothing recorded yet."
        columns={[
          { head: "When", cell: (e) => <time dateTime={e.at} title={ago(e.at)}>{at(e.at)}</time> },
          { head: "Who", cell: actor },
          { head: "Action", cell: (e) => <code>{e.action}</code> },
          { head: "Target", cell: (e) => target(e, names, keys.value?.items ?? []) },
          { head: "Status", cell: (e) => String(e.status) },
          { head: "From", cell: (e) => e.remote ?? "" },
        ]}
      />
      <Problem error={error} what="Could not read more" />
      {rows && rows.length > 0 && (
        <p data-testid="audit-more">
          {next ? (
            <button type="button" class="quiet" onClick={loadMore} disabled={busy}>
              {busy ? "Loading…" : "Load more"}
            </button>
          ) : (
            <span class="muted small">The start of the log.</span>
          )}
        </p>
      )}
    </>
  );
}
