// The task list: status, profile, title and last activity, with search
// and filters, refreshed while open.
import { useMemo, useState } from "preact/hooks";
import { enc, listAll, q } from "../api/client";
import type { Profile, Task } from "../api/types";
import { ago, money } from "../lib/format";
import { useChanges } from "../lib/useChanges";
import { useLoad } from "../lib/useLoad";
import { Table } from "../ui/Table";
import { StateBadge } from "../ui/StateBadge";

const states = ["", "starting", "running", "idle", "stopped", "failed"];

export function Tasks() {
  const [state, setState] = useState("");
  const [profile, setProfile] = useState("");
  const [search, setSearch] = useState("");
  const tasks = useLoad((s) => listAll<Task>("/v1/tasks" + q({ state, profile }), s), [state, profile]);
  const profiles = useLoad((s) => listAll<Profile>("/v1/profiles", s), []);
  useChanges(["tasks"], tasks.reload);
  const names = useMemo(() => new Map((profiles.value?.items ?? []).map((p) => [p.id, p.name])), [profiles.value]);
  const shown = useMemo(() => {
    const needle = search.trim().toLowerCase();
    const all = [...(tasks.value?.items ?? [])].sort((a, b) => b.updated_at.localeCompare(a.updated_at));
    return needle ? all.filter((t) => t.title.toLowerCase().includes(needle) || t.id.includes(needle)) : all;
  }, [tasks.value, search]);

  return (
    <>
      <div class="head">
        <h1>Tasks</h1>
        <a class="button" href="/tasks/new">
          Start a task
        </a>
      </div>
      <div class="filters" role="search">
        <label>
          Search
          <input type="search" value={search} onInput={(e) => setSearch(e.currentTarget.value)} placeholder="Title or id" />
        </label>
        <label>
          State
          <select value={state} onChange={(e) => setState(e.currentTarget.value)}>
            {states.map((s) => (
              <option value={s}>{s || "any"}</option>
            ))}
          </select>
        </label>
        <label>
          Profile
          <select value={profile} onChange={(e) => setProfile(e.currentTarget.value)}>
            <option value="">any</option>
            {(profiles.value?.items ?? []).map((p) => (
              <option value={p.name}>{p.name}</option>
            ))}
          </select>
        </label>
      </div>
      <Table
        what="tasks"
        rows={tasks.value ? shown : undefined}
        loading={tasks.loading}
        error={tasks.error}
        testid="task-list"
        empty={
          <>
            No tasks yet. <a href="/tasks/new">Start one</a>.
          </>
        }
        columns={[
          { head: "Status", cell: (t) => <StateBadge state={t.state} label="Task" /> },
          {
            head: "Title",
            cell: (t) => (
              <>
                <a href={"/tasks/" + enc(t.id)}>{t.title}</a>
                {t.error && <div class="problem small">{t.error}</div>}
              </>
            ),
          },
          { head: "Profile", wide: true, cell: (t) => names.get(t.profile_id) ?? t.profile_id.slice(0, 8) },
          { head: "Cost", cell: (t) => <span data-testid="task-list-cost">{money(t.usage?.cost)}</span> },
          { head: "Last activity", cell: (t) => <time dateTime={t.updated_at}>{ago(t.updated_at)}</time> },
        ]}
      />
    </>
  );
}
