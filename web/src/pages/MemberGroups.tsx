// A member's groups on the People page: listed, and for an admin who may
// change the member, edited in place (PUT /v1/members/{id} with the whole
// list).
import { useState } from "preact/hooks";
import { call, enc } from "../api/client";
import type { Member, SetMemberRequest } from "../api/types";
import { groupProblem, memberName } from "../lib/grants";
import { NameList } from "../ui/NameList";
import { Problem } from "../ui/Problem";

export function MemberGroups(props: { member: Member; editable: boolean; onSaved: (m: Member) => void }) {
  const m = props.member;
  const who = memberName(m);
  const [draft, setDraft] = useState<string[]>();
  const [error, setError] = useState<Error>();
  const [saving, setSaving] = useState(false);
  const save = async () => {
    if (!draft) return;
    setSaving(true);
    setError(undefined);
    try {
      const body: SetMemberRequest = { groups: draft };
      props.onSaved(await call<Member>("PUT", "/v1/members/" + enc(m.user_id), body));
      setDraft(undefined);
    } catch (err) {
      setError(err as Error);
    } finally {
      setSaving(false);
    }
  };
  if (!draft) {
    return (
      <div class="member-groups" data-testid="member-groups">
        <span>{m.groups.length ? m.groups.join(", ") : <span class="muted">none</span>}</span>
        {props.editable && (
          <button type="button" class="quiet small" aria-label={"Edit groups of " + who} onClick={() => setDraft([...m.groups])}>
            Edit
          </button>
        )}
      </div>
    );
  }
  return (
    <div class="member-groups editing" role="group" aria-label={"Groups of " + who}>
      <NameList id={"g-" + m.user_id} what="group" names={draft} onChange={setDraft} problem={(n, l) => groupProblem(n, l)} empty="In no group." />
      <Problem error={error} what="Could not save the groups" />
      <div class="inline-form">
        <button type="button" class="small" disabled={saving} aria-label={"Save groups of " + who} onClick={save}>
          {saving ? "Saving…" : "Save"}
        </button>
        <button type="button" class="quiet small" onClick={() => (setDraft(undefined), setError(undefined))}>
          Cancel
        </button>
      </div>
    </div>
  );
}
