// Start a task: a prompt, a profile, and the profile's grant receipt
// shown before launch.
import { useEffect, useState } from "preact/hooks";
import { enc, get, listAll, post } from "../api/client";
import type { Profile, ProfileResponse, Task } from "../api/types";
import { useLoad } from "../lib/useLoad";
import { navigate } from "../router";
import { Loading, Problem } from "../ui/Problem";
import { ReceiptView } from "../ui/Receipt";

export function Composer() {
  const profiles = useLoad((s) => listAll<Profile>("/v1/profiles", s), []);
  const [profile, setProfile] = useState("");
  const [prompt, setPrompt] = useState("");
  const [error, setError] = useState<Error>();
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    const first = profiles.value?.items[0]?.name;
    if (!profile && first) setProfile(first);
  }, [profiles.value, profile]);
  const receipt = useLoad((s) => (profile ? get<ProfileResponse>("/v1/profiles/" + enc(profile), s) : Promise.resolve(undefined)), [profile]);

  const start = async (e: Event) => {
    e.preventDefault();
    if (!prompt.trim()) return setError(new Error("Write what the agent should do."));
    setBusy(true);
    setError(undefined);
    try {
      const t = await post<Task>("/v1/tasks", { profile, prompt });
      navigate("/tasks/" + enc(t.id));
    } catch (err) {
      setError(err as Error);
      setBusy(false);
    }
  };

  return (
    <>
      <h1>Start a task</h1>
      <div class="split">
        <form class="composer" onSubmit={start}>
          <label for="prompt">What should the agent do?</label>
          <textarea
            id="prompt"
            rows={8}
            value={prompt}
            onInput={(e) => setPrompt(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && (e.metaKey || e.ctrlKey)) start(e);
            }}
            placeholder="Fix the failing test in ./pkg and explain the cause"
          />
          <label for="profile">Profile</label>
          {profiles.loading && !profiles.value ? (
            <Loading what="profiles" />
          ) : (profiles.value?.items ?? []).length === 0 ? (
            <p class="empty">
              No profiles yet: <a href="/profiles/new">make one</a> first.
            </p>
          ) : (
            <select id="profile" value={profile} onChange={(e) => setProfile(e.currentTarget.value)}>
              {(profiles.value?.items ?? []).map((p) => (
                <option value={p.name}>{p.name}</option>
              ))}
            </select>
          )}
          <Problem error={error} what="Could not start the task" />
          <button type="submit" disabled={busy || !profile}>
            {busy ? "Starting…" : "Start task"}
          </button>
          <p class="muted small">Ctrl+Enter starts it.</p>
        </form>
        <div class="side">
          <Problem error={receipt.error} what="Receipt" />
          <ReceiptView receipt={receipt.value?.receipt} problems={receipt.value?.problems} />
        </div>
      </div>
    </>
  );
}
