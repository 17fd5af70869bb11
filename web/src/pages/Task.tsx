// A task: its live conversation, its changes, its files and a terminal
// in its session, with the task's and the session's state.
import { useEffect, useState } from "preact/hooks";
import { enc, get, post } from "../api/client";
import { follow } from "../api/sse";
import type { Task as TaskT, TaskEvent } from "../api/types";
import { empty, fold, type Conversation } from "../lib/conversation";
import { useTitle } from "../lib/title";
import { useSession } from "../lib/useSession";
import { navigate } from "../router";
import { Problem } from "../ui/Problem";
import { StateBadge } from "../ui/StateBadge";
import { Tabs } from "../ui/Tabs";
import { TaskConversation } from "./TaskConversation";
import { TaskFiles } from "./TaskFiles";
import { TaskMeta } from "./TaskMeta";
import { lazy } from "../ui/Lazy";

const TaskChanges = lazy(() => import("./TaskChanges").then((m) => m.TaskChanges), "the changes");
const Terminal = lazy(() => import("./Terminal").then((m) => m.Terminal), "the terminal");

const tabs = [
  { id: "conversation", label: "Conversation" },
  { id: "changes", label: "Changes" },
  { id: "files", label: "Files" },
  { id: "terminal", label: "Terminal" },
];

export function Task(props: { id: string; tab: string }) {
  const [task, setTask] = useState<TaskT>();
  const [error, setError] = useState<Error>();
  const [conv, setConv] = useState<Conversation>(empty);
  useEffect(() => {
    setConv(empty);
    const load = () => get<TaskT>("/v1/tasks/" + enc(props.id)).then(setTask, setError);
    load();
    const f = follow("/v1/tasks/" + enc(props.id) + "/events?follow=true", (m) => {
      try {
        const e = JSON.parse(m.data) as TaskEvent;
        setConv((c) => fold(c, e));
        if (["session", "idle", "stopped", "setup_failed", "run_started", "prompt", "usage"].includes(e.type)) load();
      } catch {
        /* a malformed event is skipped */
      }
    });
    return () => f.stop();
  }, [props.id]);
  const session = useSession(task?.session_id);
  const tab = tabs.some((t) => t.id === props.tab) ? props.tab : "conversation";
  const stopped = task?.state === "stopped" || task?.state === "failed";
  useTitle(tab === "conversation" ? undefined : tabs.find((t) => t.id === tab)?.label, task?.title, "Task");

  return (
    <>
      <div class="head">
        <h1 class="title">{task?.title ?? "Task"}</h1>
        <div class="states">
          <StateBadge state={task?.state} label="Task" prefix />
          {task?.session_id && (
            <a href={"/sessions/" + enc(task.session_id)} data-testid="session-badge">
              <StateBadge state={session?.state} label="Session" prefix />
            </a>
          )}
          {!stopped && task && (
            <button
              class="danger quiet"
              onClick={() => post<TaskT>("/v1/tasks/" + enc(props.id) + "/stop").then(setTask, setError)}
            >
              Stop
            </button>
          )}
        </div>
      </div>
      {task && <TaskMeta task={task} />}
      <Problem error={error} />
      {task?.error && <p class="problem">{task.error}</p>}
      <Tabs tabs={tabs} current={tab} onSelect={(t) => navigate("/tasks/" + enc(props.id) + (t === "conversation" ? "" : "?tab=" + t), true)} />
      <div role="tabpanel" id={"panel-" + tab} aria-labelledby={"tab-" + tab}>
        {tab === "conversation" && <TaskConversation taskId={props.id} sessionId={task?.session_id} conv={conv} stopped={stopped} turn={conv.turn} />}
        {tab === "changes" && <TaskChanges taskId={props.id} />}
        {tab === "files" && <TaskFiles taskId={props.id} sessionId={task?.session_id} />}
        {tab === "terminal" && (task?.session_id ? <Terminal sessionId={task.session_id} dir="/work" /> : <p class="muted">No session yet.</p>)}
      </div>
    </>
  );
}
