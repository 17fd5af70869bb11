// useChanges re-reads a list when the server says one of its topics
// changed (GET /v1/changes), and every 30 s besides (a change missed while
// the stream was down). No topics: nothing is followed.
import { useEffect } from "preact/hooks";
import { follow } from "../api/sse";

export function useChanges(topics: ("sessions" | "tasks" | "hosts")[], reload: () => void): void {
  const key = topics.join(",");
  useEffect(() => {
    if (key === "") return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const soon = () => {
      if (timer === undefined) timer = setTimeout(() => ((timer = undefined), reload()), 100);
    };
    const f = follow("/v1/changes?topics=" + key, soon, { onState: (live) => live && soon() });
    const poll = setInterval(reload, 30_000);
    return () => {
      f.stop();
      clearInterval(poll);
      if (timer !== undefined) clearTimeout(timer);
    };
  }, [key, reload]);
}
