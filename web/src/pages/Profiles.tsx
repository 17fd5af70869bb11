// Profiles: the list.
import { enc, listAll } from "../api/client";
import type { Profile } from "../api/types";
import { ago } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { Loading, Problem } from "../ui/Problem";

export function Profiles() {
  const list = useLoad((s) => listAll<"profiles", Profile>("/v1/profiles", "profiles", s), []);
  const ps = list.value?.profiles ?? [];
  return (
    <>
      <div class="head">
        <h1>Profiles</h1>
        <a class="button" href="/profiles/new">
          New profile
        </a>
      </div>
      <Problem error={list.error} what="Profiles" />
      {list.loading && !list.value ? (
        <Loading what="profiles" />
      ) : ps.length === 0 ? (
        <p class="empty">
          No profiles yet. A profile says what an agent gets: image, harness, repositories, hosts and credentials. <a href="/profiles/new">Make one</a>.
        </p>
      ) : (
        <table class="grid" data-testid="profile-list">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Image</th>
              <th scope="col" class="wide">
                Harness
              </th>
              <th scope="col">Version</th>
              <th scope="col" class="wide">
                Changed
              </th>
            </tr>
          </thead>
          <tbody>
            {ps.map((p) => (
              <tr>
                <td>
                  <a href={"/profiles/" + enc(p.name)}>{p.name}</a>
                </td>
                <td>{p.spec.image}</td>
                <td class="wide">{p.spec.harness}</td>
                <td>{p.version}</td>
                <td class="wide">{ago(p.updated_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
