// Names for ids: pages show a host by its name and a session's task by its
// title (the API's session carries neither), read once per page.
import { listAll } from "../api/client";
import type { Host, Task } from "../api/types";
import { useLoad } from "./useLoad";
import { isFleet, useMe } from "./useMe";

/** useHostNames maps host ids to names (empty while loading). */
export function useHostNames(): Map<string, string> {
  const fleet = isFleet(useMe()); // hosts are a fleet operator's to see
  const hosts = useLoad((s) => (fleet ? listAll<Host>("/v1/hosts", s) : Promise.resolve(undefined)), [fleet]);
  return new Map((hosts.value?.items ?? []).map((h) => [h.id, h.name]));
}

/** useTasksBySession maps session ids to the task running in each. */
export function useTasksBySession(key: unknown[] = []): Map<string, Task> {
  const tasks = useLoad((s) => listAll<Task>("/v1/tasks", s), key);
  const m = new Map<string, Task>();
  for (const t of tasks.value?.items ?? []) {
    for (const sid of [...(t.sessions ?? []), t.session_id ?? ""]) if (sid) m.set(sid, t);
  }
  return m;
}
