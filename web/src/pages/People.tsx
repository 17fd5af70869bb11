// People (admins): the organisation's members, their roles and groups,
// adding and removing one, and the organisation's keys. A role is given
// up to one's own (and only such members are changed); removing a member
// stops their keys at once.
import { useState } from "preact/hooks";
import { call, del, enc, listAll } from "../api/client";
import type { AddMemberRequest, Member, SetMemberRequest } from "../api/types";
import { ago } from "../lib/format";
import { memberName } from "../lib/grants";
import { useLoad } from "../lib/useLoad";
import { isAdmin, useMe } from "../lib/useMe";
import { MemberGroups } from "./MemberGroups";
import { OrgKeys } from "./OrgKeys";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";

const roles: Member["role"][] = ["member", "admin", "owner"];

export function People() {
  const me = useMe();
  const admin = isAdmin(me);
  const list = useLoad((s) => (admin ? listAll<Member>("/v1/members", s) : Promise.resolve(undefined)), [admin]);
  const [email, setEmail] = useState("");
  const [role, setRole] = useState<Member["role"]>("member");
  const [error, setError] = useState<Error>();
  // One may give a role up to one's own.
  const givable = roles.slice(0, roles.indexOf((me?.role ?? "member") as Member["role"]) + 1);
  const add = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      const body: AddMemberRequest = { email, role };
      await call("POST", "/v1/members", body);
      setEmail("");
      list.reload();
    } catch (err) {
      setError(err as Error);
    }
  };
  const setTo = (m: Member, r: Member["role"]) => {
    const body: SetMemberRequest = { role: r };
    return call("PUT", "/v1/members/" + enc(m.user_id), body).then(list.reload, setError);
  };
  const remove = (m: Member) =>
    confirm("Remove " + memberName(m) + "? Their keys stop at once.") && del("/v1/members/" + enc(m.user_id)).then(list.reload, setError);
  if (me && !admin)
    return (
      <>
        <h1>People</h1>
        <p class="empty">The organisation's admins manage its members and keys. Your own keys are on your <a href="/account">account</a>.</p>
      </>
    );
  return (
    <>
      <h1>People</h1>
      <form class="editor" onSubmit={add} data-testid="member-form">
        <div class="row inline">
          <label for="m-email">Email</label>
          <input id="m-email" type="email" value={email} onInput={(e) => setEmail(e.currentTarget.value)} required />
          <label for="m-role">Role</label>
          <select id="m-role" value={role} onChange={(e) => setRole(e.currentTarget.value as Member["role"])}>
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
        loading={!me || list.loading}
        error={list.error}
        testid="member-list"
        empty="No members."
        columns={[
          { head: "Email", cell: memberName },
          {
            head: "Role",
            cell: (m) =>
              m.user_id === me?.user_id || !givable.includes(m.role) ? (
                m.role
              ) : (
                <select aria-label={"Role of " + memberName(m)} value={m.role} onChange={(e) => setTo(m, e.currentTarget.value as Member["role"])}>
                  {givable.map((r) => (
                    <option value={r}>{r}</option>
                  ))}
                </select>
              ),
          },
          { head: "Groups", cell: (m) => <MemberGroups member={m} editable={givable.includes(m.role)} onSaved={list.reload} /> },
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
      <p class="hint">Profiles granted to a group are for its members. Groups sent by your identity provider replace a member's groups at their next sign-in.</p>
      {admin && <OrgKeys members={list.value?.items ?? []} me={me?.user_id} keyID={me?.key_id} />}
    </>
  );
}
