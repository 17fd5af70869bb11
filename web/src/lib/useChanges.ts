// useChanges re-reads a list when the server says one of its topics
// changed (GET /v1/changes), and every 30 s besides (a change missed while
// the stream was down). No topics: nothing is followed. A tab holds one
// change feed of every topic, shared by all its hooks: a browser gives an
// origin served over HTTP/1.1 six connections, and each open stream keeps
// one. It follows hosts only while a page shows them (the topic is a fleet
// operator's).
import { useEffect } from "preact/hooks";
import { follow, type Follow } from "../api/sse";

type Topic = "sessions" | "tasks" | "hosts";

type listener = { topics: Topic[]; fire: () => void };

const listeners = new Set<listener>();
let feed: Follow | undefined;
let feedTopics = "";

/** wanted is every topic a listener follows, in a stable order (hosts only for a page that shows them: a fleet operator's). */
function wanted(): string {
  const all = new Set<Topic>();
  for (const l of listeners) l.topics.forEach((t) => all.add(t));
  return (["sessions", "tasks", "hosts"] as Topic[]).filter((t) => all.has(t)).join(",");
}

/** refeed (re)opens the tab's feed on the topics its listeners follow, or closes it when none does. */
function refeed(): void {
  const topics = wanted();
  if (topics === feedTopics && (feed !== undefined || topics === "")) return;
  feed?.stop();
  feed = undefined;
  feedTopics = topics;
  if (topics === "") return;
  feed = follow(
    "/v1/changes?topics=" + topics,
    (m) => {
      for (const x of listeners) if (x.topics.includes(m.event as Topic)) x.fire();
    },
    // A stream (re)opened may have missed changes: everyone re-reads.
    { onState: (live) => live && listeners.forEach((x) => x.fire()) },
  );
}

/** listen adds l to the tab's feed (opening it, or reopening it for a new topic); the returned function removes it. */
function listen(l: listener): () => void {
  listeners.add(l);
  refeed();
  return () => {
    listeners.delete(l);
    if (listeners.size === 0) refeed();
  };
}

export function useChanges(topics: Topic[], reload: () => void): void {
  const key = topics.join(",");
  useEffect(() => {
    if (key === "") return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const soon = () => {
      if (timer === undefined) timer = setTimeout(() => ((timer = undefined), reload()), 100);
    };
    const stop = listen({ topics: key.split(",") as Topic[], fire: soon });
    const poll = setInterval(reload, 30_000);
    return () => {
      stop();
      clearInterval(poll);
      if (timer !== undefined) clearTimeout(timer);
    };
  }, [key, reload]);
}
