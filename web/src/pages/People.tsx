// People (admins): the organisation's members, their roles, adding and
// removing one. A role is given up to one's own; removing a member stops
// their keys at once.
import { useState } from "preact/hooks";
import { call, del, enc, listAll } from "../api/client";
import type { Member } from "../api/types";
import { ago } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { useMe } from "../lib/useMe";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";

const roles = ["member", "admin", "owner"];

export function People() {
  const me = useMe();
  const list = useLoad((s) => listAll<Member>("/v1/members", s), []);
  const [email, setEmail] = useState("");
  const [role, setRole] = useState("member");
  const [error, setError] = useState<Error>();
  // One may give a role up to one's own.
  const givable = roles.slice(0, roles.indexOf(me?.role ?? "member") + 1);
  const add = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      await call("POST", "/v1/members", { email, role });
      setEmail("");
      list.reload();
    } catch (err) {
      setError(err as Error);
    }
  };
  const setTo = (m: Member, r: string) => call("PUT", "/v1/members/" + enc(m.user_id), { role: r }).then(list.reload, setError);
  const remove = (m: Member) =>
    confirm("Remove " + (m.email || m.user_id) + "? Their keys stop at once.") && del("/v1/members/" + enc(m.user_id)).then(list.reload, setError);
  return (
    <>
      <h1>People</h1>
      <form class="editor" onSubmit={add} data-testid="member-form">
        <div class="row inline">
          <label for="m-email">Email</label>
          <input id="m-email" type="email" value={email} onInput={(e) => setEmail(e.currentTarget.value)} required />
          <label for="m-role">Role</label>
          <select id="m-role" value={role} onChange={(e) => setRole(e.currentTarget.value)}>
            {givable.map((r) => (
              <option value={r}>{r}</option>
            ))}
          </select>
        </div>
        <p class="hint">They sign in with your identity provider by this email, or with a key an admin makes for them.</p>
        <Problem error={error} what="Could not do that" />
        <button type="submit">Add member</button>
      </form>
      <Table
        what="members"
        rows={list.value?.items}
        loading={list.loading}
        error={list.error}
        testid="member-list"
        empty="No members."
        columns={[
          { head: "Email", cell: (m) => m.email || m.name || m.user_id },
          {
            head: "Role",
            cell: (m) =>
              m.user_id === me?.user_id || !givable.includes(m.role) ? (
                m.role
              ) : (
                <select aria-label={"Role of " + (m.email || m.user_id)} value={m.role} onChange={(e) => setTo(m, e.currentTarget.value)}>
                  {givable.map((r) => (
                    <option value={r}>{r}</option>
                  ))}
                </select>
              ),
          },
          { head: "Added", wide: true, cell: (m) => ago(m.added_at) },
          {
            head: "Actions",
            hidden: true,
            cell: (m) =>
              m.user_id === me?.user_id || !givable.includes(m.role) ? null : (
                <button class="quiet danger" onClick={() => remove(m)}>
                  Remove
                </button>
              ),
          },
        ]}
      />
    </>
  );
}
