// The profile editor's "Who may use it" (admins): everyone, members
// picked by email (kept as user ids; owners and admins are not offered:
// they may use every profile), and groups by name.
import { useState } from "preact/hooks";
import type { Member } from "../api/types";
import { groupProblem, memberName, nameOf, type Who } from "../lib/grants";
import { NameList } from "../ui/NameList";

export function ProfileGrants(props: { who: Who; members: Member[]; onChange: (w: Who) => void }) {
  const { who, members, onChange } = props;
  const [pick, setPick] = useState("");
  const left = members.filter((m) => m.role === "member" && !who.users.includes(m.user_id));
  const chosen = pick && left.some((m) => m.user_id === pick) ? pick : (left[0]?.user_id ?? "");
  const nobody = !who.everyone && who.users.length === 0 && who.groups.length === 0;
  return (
    <fieldset data-testid="profile-grants">
      <legend>Who may use it</legend>
      <p class="hint">Owners and admins may use every profile. Members may start tasks with it when it is granted to everyone, to them, or to a group they are in.</p>
      <label class="check">
        <input type="checkbox" checked={who.everyone} onChange={(e) => onChange({ ...who, everyone: e.currentTarget.checked })} />
        Everyone in the organisation
      </label>
      <p class="group-head" id="p-grant-members">
        Members
      </p>
      {who.users.length > 0 && (
        <ul class="names" aria-label="Members granted">
          {who.users.map((u) => (
            <li>
              <span class="name">{nameOf(u, { members })}</span>
              <button type="button" class="quiet danger small" aria-label={"Remove member " + nameOf(u, { members })} onClick={() => onChange({ ...who, users: who.users.filter((x) => x !== u) })}>
                Remove
              </button>
            </li>
          ))}
        </ul>
      )}
      {left.length > 0 ? (
        <div class="inline-form">
          <label class="sr-only" for="p-grant-member">
            Member to grant
          </label>
          <select id="p-grant-member" value={chosen} onChange={(e) => setPick(e.currentTarget.value)}>
            {left.map((m) => (
              <option value={m.user_id}>{memberName(m)}</option>
            ))}
          </select>
          <button type="button" class="quiet" disabled={!chosen} onClick={() => chosen && onChange({ ...who, users: [...who.users, chosen] })}>
            Add member
          </button>
        </div>
      ) : (
        <p class="muted small">{who.users.length === 0 ? "No members to pick: everyone here is an owner or admin." : "Every member is picked."}</p>
      )}
      <p class="group-head" id="p-grant-groups">
        Groups
      </p>
      <NameList id="p-grant-group" what="group" names={who.groups} onChange={(groups) => onChange({ ...who, groups })} problem={(n, l) => groupProblem(n, l, 200)} />
      {nobody && (
        <p class="hint" data-testid="grants-nobody">
          Granted to no one: only owners and admins may use it.
        </p>
      )}
    </fieldset>
  );
}
