// The profile editor's repositories: one row each (URL, branch, the git
// credential the coordinator clones with, and what the guest may do with
// it through the credential broker: push, call the host's REST API).
import type { ProfileRepo, Secret } from "../api/types";
import { keyOf } from "../lib/automationDef";
import { FieldProblems } from "../ui/Field";

export function ProfileRepos(props: { repos: ProfileRepo[]; secrets: Secret[]; problems?: string[]; onChange: (repos: ProfileRepo[]) => void }) {
  const { repos, onChange } = props;
  const set = (i: number, r: ProfileRepo) => onChange(repos.map((x, j) => (j === i ? r : x)));
  const git = props.secrets.filter((s) => s.kind === "git_https" || s.kind === "github_app").map((s) => s.name);
  const invalid = props.problems?.length ? { "aria-invalid": true, "aria-describedby": "p-repos-err" } : {};
  return (
    <fieldset data-testid="profile-repos">
      <legend>Repositories</legend>
      {repos.length === 0 && <p class="muted small">No repositories: tasks start with an empty work directory.</p>}
      {repos.length > 0 && (
        <table class="inputs">
          <thead>
            <tr>
              <th>URL</th>
              <th>Branch</th>
              <th>Credential</th>
              <th>Push</th>
              <th>API</th>
              <th>
                <span class="sr-only">Remove</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {repos.map((r, i) => (
              <tr key={keyOf(r)}>
                <td data-label="URL">
                  <input {...invalid} aria-label={`Repository ${i + 1} URL`} value={r.url} placeholder="https://github.com/acme/app.git" onInput={(e) => set(i, { ...r, url: e.currentTarget.value })} />
                </td>
                <td data-label="Branch">
                  <input aria-label={`Repository ${i + 1} branch`} value={r.ref ?? ""} placeholder="default" onInput={(e) => set(i, { ...r, ref: e.currentTarget.value })} />
                </td>
                <td data-label="Credential">
                  <select aria-label={`Repository ${i + 1} credential`} value={r.credential ?? ""} onChange={(e) => set(i, { ...r, credential: e.currentTarget.value })}>
                    <option value="">none</option>
                    {[...new Set([...git, ...(r.credential ? [r.credential] : [])])].map((n) => (
                      <option value={n}>{n}</option>
                    ))}
                  </select>
                </td>
                <td data-label="Push">
                  <input type="checkbox" aria-label={`Repository ${i + 1}: the agent may push`} checked={!!r.push} onChange={(e) => set(i, { ...r, push: e.currentTarget.checked })} />
                </td>
                <td data-label="API">
                  <input type="checkbox" aria-label={`Repository ${i + 1}: the agent may call its REST API`} checked={!!r.api} onChange={(e) => set(i, { ...r, api: e.currentTarget.checked })} />
                </td>
                <td>
                  <button type="button" class="quiet danger" aria-label={`Remove repository ${i + 1}`} onClick={() => onChange(repos.filter((_, j) => j !== i))}>
                    Remove
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <p class="hint">With a credential the agent may fetch the repository through the credential broker; Push lets it push, API call the host's REST API for it (writes need Push too). Nothing else reaches the host with the credential.</p>
      <FieldProblems id="p-repos-err" problems={props.problems} />
      <button type="button" class="quiet" onClick={() => onChange([...repos, { url: "" }])}>
        Add a repository
      </button>
    </fieldset>
  );
}
