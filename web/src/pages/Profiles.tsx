// Profiles: the list, with who may use each.
import { enc, listAll } from "../api/client";
import type { Profile } from "../api/types";
import { ago } from "../lib/format";
import { grantLabels } from "../lib/grants";
import { useLoad } from "../lib/useLoad";
import { Table } from "../ui/Table";
import { isAdmin, useMe } from "../lib/useMe";
import { useMembers } from "../lib/useMembers";

export function Profiles() {
  const list = useLoad((s) => listAll<Profile>("/v1/profiles", s), []);
  const ps = list.value?.items ?? [];
  const me = useMe();
  const admin = isAdmin(me);
  const members = useMembers(admin);
  const names = { members: members.value?.items ?? [], me: me?.user_id };
  return (
    <>
      <div class="head">
        <h1>Profiles</h1>
        {admin && (
          <a class="button" href="/profiles/new">
            New profile
          </a>
        )}
      </div>
      <Table
        what="profiles"
        rows={list.value ? ps : undefined}
        loading={list.loading}
        error={list.error}
        testid="profile-list"
        empty={
          <>
            No profiles yet. A profile says what an agent gets: image, harness, repositories, hosts and credentials. {admin ? <a href="/profiles/new">Make one</a> : "An admin makes them"}.
          </>
        }
        columns={[
          { head: "Name", cell: (p) => <a href={"/profiles/" + enc(p.name)}>{p.name}</a> },
          { head: "Image", cell: (p) => p.spec.image },
          { head: "Harness", wide: true, cell: (p) => p.spec.harness },
          { head: "Who may use it", cell: (p) => <span data-testid="profile-who">{grantLabels(p.grants, names).join(", ")}</span> },
          { head: "Version", cell: (p) => p.version },
          { head: "Changed", wide: true, cell: (p) => ago(p.updated_at) },
        ]}
      />
    </>
  );
}
