// A task: its live conversation, its changes, its files and a terminal
// in its session, with the task's and the session's state. Looking wakes
// nothing: the conversation and both states come from the database (the
// session's through the change feed), and an idle session resumes only
// when the user acts: Resume, the Terminal tab, a follow-up, or asking
// for the Changes or Files, which are read from its disk.
import { useEffect, useState } from "preact/hooks";
import { enc, get, post } from "../api/client";
import { follow } from "../api/sse";
import type { ComponentChildren } from "preact";
import type { Session, Task as TaskT, TaskEvent } from "../api/types";
import { empty, fold, type Conversation } from "../lib/conversation";
import { useTitle } from "../lib/title";
import { useMayDrive, useMayEnd } from "../lib/useMayDrive";
import { useSession } from "../lib/useSession";
import { navigate } from "../router";
import { Loading, Problem } from "../ui/Problem";
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
  const session = useSession(task?.session_id).session;
  // A task shared with a member whose profile is not granted to them is
  // theirs to read only.
  const drive = useMayDrive(task);
  const mayEnd = useMayEnd(task, drive);
  // Whether the session's state is known (or there is none): until then a
  // tab that reads its disk waits, not to resume it unasked.
  const known = task !== undefined && (!task.session_id || session !== undefined);
  const [resuming, setResuming] = useState(false);
  const resume = () => {
    if (!task?.session_id) return;
    setResuming(true);
    post("/v1/sessions/" + enc(task.session_id) + "/resume")
      .catch((e: Error) => setError(e))
      .finally(() => setResuming(false));
  };
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
          {session?.state === "idle" && drive && (
            <button onClick={resume} disabled={resuming}>
              {resuming ? "Resuming…" : "Resume"}
            </button>
          )}
          {!stopped && task && mayEnd && (
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
        {tab === "conversation" && (
          <TaskConversation taskId={props.id} sessionId={task?.session_id} conv={conv} stopped={stopped || drive !== true} turn={conv.turn} />
        )}
        {tab === "conversation" && drive === false && !stopped && (
          <p class="muted" data-testid="read-only">
            You may read this task: continuing it needs its profile, which is not granted to you.
          </p>
        )}
        {tab === "changes" && (
          <ReadsDisk known={known} session={session} what="the changes" key={props.id}>
            <TaskChanges taskId={props.id} />
          </ReadsDisk>
        )}
        {tab === "files" && (
          <ReadsDisk known={known} session={session} what="the files" key={props.id}>
            <TaskFiles taskId={props.id} sessionId={task?.session_id} />
          </ReadsDisk>
        )}
        {tab === "terminal" &&
          (!task?.session_id ? (
            <p class="muted">No session yet.</p>
          ) : drive === undefined ? (
            <Loading what="whether you may use the terminal" />
          ) : drive ? (
            <Terminal sessionId={task.session_id} dir="/work" />
          ) : (
            <p class="muted">A terminal drives the task&apos;s session: it needs the task&apos;s profile, which is not granted to you.</p>
          ))}
      </div>
    </>
  );
}

/**
 * ReadsDisk shows a tab read from the session's disk at once when the
 * session is not idle, and otherwise only once asked: reading it resumes
 * the session, and opening a page must not.
 */
function ReadsDisk(props: { known: boolean; session?: Session; what: string; children: ComponentChildren }) {
  const [asked, setAsked] = useState(false);
  if (!props.known) return <Loading what="the session's state" />;
  if ((props.session?.state === "idle" || props.session?.state === "suspending") && !asked) {
    return (
      <p class="empty" data-testid="suspended">
        The session is suspended: {props.what} are on its disk, and reading them resumes it.{" "}
        <button onClick={() => setAsked(true)}>Resume and show {props.what}</button>
      </p>
    );
  }
  return <>{props.children}</>;
}
