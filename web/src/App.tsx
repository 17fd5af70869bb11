// The routes: every page has its own URL.
import { useEffect, useLayoutEffect } from "preact/hooks";
import { signedIn as isSignedIn } from "./api/auth";
import { Account } from "./pages/Account";
import { Audit } from "./pages/Audit";
import { AutomationEditor } from "./pages/AutomationEditor";
import { Automations } from "./pages/Automations";
import { Composer } from "./pages/Composer";
import { Harnesses } from "./pages/Harnesses";
import { Hosts } from "./pages/Hosts";
import { ImagePage } from "./pages/ImagePage";
import { Images } from "./pages/Images";
import { Login } from "./pages/Login";
import { People } from "./pages/People";
import { ProfileEditor } from "./pages/ProfileEditor";
import { Profiles } from "./pages/Profiles";
import { Run } from "./pages/Run";
import { Secrets } from "./pages/Secrets";
import { Session } from "./pages/Session";
import { Sessions } from "./pages/Sessions";
import { Settings } from "./pages/Settings";
import { Task } from "./pages/Task";
import { Tasks } from "./pages/Tasks";
import { match, navigate, usePath } from "./router";
import { Layout } from "./ui/Layout";

function page(path: string) {
  const query = new URLSearchParams(path.split("?")[1] ?? "");
  const tab = query.get("tab") ?? "";
  let m: Record<string, string> | null;
  if (match("/tasks", path) || match("/", path)) return <Tasks />;
  if (match("/tasks/new", path)) return <Composer />;
  if ((m = match("/tasks/:id", path))) return <Task id={m.id} tab={tab} />;
  if (match("/sessions", path)) return <Sessions host={query.get("host") ?? undefined} />;
  if ((m = match("/sessions/:id", path))) return <Session id={m.id} tab={tab} />;
  if (match("/profiles", path)) return <Profiles />;
  if (match("/profiles/new", path)) return <ProfileEditor />;
  if ((m = match("/profiles/:name", path))) return <ProfileEditor name={m.name} />;
  if (match("/automations", path)) return <Automations />;
  if (match("/automations/new", path)) return <AutomationEditor />;
  if ((m = match("/automations/:name", path))) return <AutomationEditor name={m.name} />;
  if ((m = match("/runs/:id", path))) return <Run id={m.id} />;
  if (match("/images", path)) return <Images />;
  if ((m = match("/images/:name", path))) return <ImagePage name={m.name} />;
  if (match("/harnesses", path)) return <Harnesses />;
  if (match("/secrets", path)) return <Secrets />;
  if (match("/hosts", path) || match("/hosts/:id", path)) return <Hosts />;
  if (match("/settings", path)) return <Settings />;
  if (match("/people", path)) return <People />;
  if (match("/audit", path)) return <Audit limit={query.get("limit") ?? undefined} />;
  if (match("/account", path)) return <Account />;
  return (
    <p class="empty">
      No page here. <a href="/tasks">Go to the tasks</a>.
    </p>
  );
}

// The title of a path's page until the page names itself (useTitle).
const titles: [string, string][] = [
  ["/tasks/new", "Start a task"],
  ["/profiles/new", "New profile"],
  ["/automations/new", "New automation"],
  ["/tasks", "Tasks"],
  ["/sessions", "Sessions"],
  ["/profiles", "Profiles"],
  ["/automations", "Automations"],
  ["/runs", "Run"],
  ["/images", "Images"],
  ["/harnesses", "Harnesses"],
  ["/secrets", "Secrets"],
  ["/hosts", "Hosts"],
  ["/settings", "Settings"],
  ["/people", "People"],
  ["/audit", "Audit log"],
  ["/account", "Account"],
];

export function App() {
  const path = usePath();
  const signedIn = isSignedIn();
  useEffect(() => {
    const out = () => navigate("/login", true);
    window.addEventListener("engrams:signed-out", out);
    return () => window.removeEventListener("engrams:signed-out", out);
  }, []);
  useLayoutEffect(() => {
    const t = titles.find(([p]) => path.startsWith(p));
    document.title = (t ? t[1] + " · " : "") + "engrams";
  }, [path]);
  useEffect(() => {
    if (!signedIn && !path.startsWith("/login")) navigate("/login", true);
  }, [signedIn, path]);
  if (path.startsWith("/login") || !signedIn) return <Login />;
  return <Layout path={path}>{page(path)}</Layout>;
}
