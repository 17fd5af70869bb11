// The organisation's keys on the People page (admins): each key's name,
// kind, whose it is, role, prefix and times, and Revoke. Host tokens are
// the fleet's (the Hosts page); the key this browser uses is not offered.
import { useState } from "preact/hooks";
import { del, enc, listAll } from "../api/client";
import type { Member, Token } from "../api/types";
import { ago, expires, isZero, when } from "../lib/format";
import { nameOf } from "../lib/grants";
import { useLoad } from "../lib/useLoad";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";

export function OrgKeys(props: { members: Member[]; me?: string; keyID?: string }) {
  const keys = useLoad((s) => listAll<Token>("/v1/tokens", s), []);
  const [error, setError] = useState<Error>();
  const rows = keys.value?.items.filter((k) => k.kind !== "host");
  const names = { members: props.members, me: props.me };
  const owner = (k: Token) => (!k.user_id ? "" : (k.kind === "service" ? "made by " : "") + nameOf(k.user_id, names));
  const revoke = (k: Token) =>
    confirm("Revoke key " + k.name + " (" + (owner(k) || k.kind) + ")? Whatever uses it stops at once.") &&
    del("/v1/tokens/" + enc(k.id)).then(keys.reload, setError);
  return (
    <section aria-labelledby="keys-head">
      <h2 id="keys-head">Keys</h2>
      <p class="hint">Every key of the organisation: people's keys, service keys and browsers' sign-ins. Revoking one stops it at once.</p>
      <Problem error={error} what="Could not revoke" />
      <Table
        what="keys"
        rows={rows}
        loading={keys.loading}
        error={keys.error}
        testid="org-key-list"
        empty="No keys."
        columns={[
          { head: "Name", cell: (k) => k.name },
          { head: "Kind", cell: (k) => (k.kind === "signin" ? "sign-in" : k.kind) },
          { head: "Owner", cell: owner },
          { head: "Role", cell: (k) => k.role ?? "" },
          { head: "Prefix", wide: true, cell: (k) => <code>{k.prefix}</code> },
          { head: "Created", wide: true, cell: (k) => <time dateTime={k.created_at} title={when(k.created_at)}>{ago(k.created_at)}</time> },
          { head: "Last used", wide: true, cell: (k) => (isZero(k.last_used_at) ? "never" : ago(k.last_used_at)) },
          { head: "Expires", wide: true, cell: (k) => expires(k.expires_at) },
          {
            head: "Actions",
            hidden: true,
            cell: (k) =>
              k.id === props.keyID ? (
                <span class="muted small">this browser</span>
              ) : (
                <button class="quiet danger" aria-label={"Revoke key " + k.name} onClick={() => revoke(k)}>
                  Revoke
                </button>
              ),
          },
        ]}
      />
    </section>
  );
}
