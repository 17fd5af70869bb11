// Sign in: with the one-time code of a login link (engrams dev prints
// one), or by pasting an API token.
import { useEffect, useState } from "preact/hooks";
import { setToken } from "../api/auth";
import { ApiError, call } from "../api/client";
import type { components } from "../api/schema.gen";
import { navigate } from "../router";
import { Problem } from "../ui/Problem";

type LoginResponse = components["schemas"]["DashboardLoginResponse"];

export function Login() {
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const [pasted, setPasted] = useState("");

  useEffect(() => {
    // A login link opened in a new tab loads the page; pasted into this
    // one it only changes the fragment.
    const redeem = () => {
      const code = new URLSearchParams(location.hash.slice(1)).get("code");
      if (!code) return;
      history.replaceState(null, "", "/login"); // the code works once: keep it out of history
      setBusy(true);
      setError(undefined);
      call<LoginResponse>("POST", "/v1/dashboard/login", { code }).then(
        (r) => {
          setToken(r.secret, r.token.id);
          navigate("/tasks", true);
        },
        (e: ApiError) => {
          setError(e.message);
          setBusy(false);
        },
      );
    };
    redeem();
    window.addEventListener("hashchange", redeem);
    return () => window.removeEventListener("hashchange", redeem);
  }, []);

  const useToken = async (e: Event) => {
    e.preventDefault();
    const t = pasted.trim();
    if (!t) return setError("Paste an API token (engrams token create).");
    setBusy(true);
    setToken(t);
    try {
      await call("GET", "/v1/tasks?limit=1");
      navigate("/tasks", true);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? "That token is not valid or was revoked." : String(err));
      setBusy(false);
    }
  };

  return (
    <main id="main" class="login">
      <h1>engrams</h1>
      <p>Sign in to direct agent work.</p>
      {busy && !error && <p aria-live="polite">Signing in…</p>}
      <Problem error={error} />
      <form onSubmit={useToken}>
        <label for="token">API token</label>
        <input id="token" type="password" autocomplete="off" value={pasted} onInput={(e) => setPasted(e.currentTarget.value)} placeholder="egr_…" />
        <button type="submit" disabled={busy}>
          Sign in
        </button>
      </form>
      <p class="muted">
        <code>engrams dev</code> prints a login link that signs you in once; <code>engrams token create NAME</code> makes a token.
      </p>
    </main>
  );
}
