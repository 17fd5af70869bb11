// Sign in: with the organisation's identity provider (where one is
// configured), with the one-time code of a login link (engrams dev prints
// one), or by pasting an API key. The first two set a sign-in cookie.
import { useEffect, useState } from "preact/hooks";
import { setToken } from "../api/auth";
import { ApiError, call, get } from "../api/client";
import type { components } from "../api/schema.gen";
import { forgetMe } from "../lib/useMe";
import { navigate } from "../router";
import { Problem } from "../ui/Problem";

type SignedIn = components["schemas"]["SignedIn"];
type AuthConfig = components["schemas"]["AuthConfig"];

export function Login() {
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const [pasted, setPasted] = useState("");
  const [oidc, setOIDC] = useState(false);

  useEffect(() => {
    get<AuthConfig>("/v1/auth/config").then(
      (c) => setOIDC(c.oidc),
      () => setOIDC(false),
    );
  }, []);

  useEffect(() => {
    // A login link opened in a new tab loads the page; pasted into this
    // one it only changes the fragment.
    const redeem = () => {
      const code = new URLSearchParams(location.hash.slice(1)).get("code");
      if (!code) return;
      history.replaceState(null, "", "/login"); // the code works once: keep it out of history
      setBusy(true);
      setError(undefined);
      call<SignedIn>("POST", "/v1/dashboard/login", { code }).then(
        () => (forgetMe(), navigate("/tasks", true)),
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

  const useKey = async (e: Event) => {
    e.preventDefault();
    const t = pasted.trim();
    if (!t) return setError("Paste an API key (engrams token create).");
    setBusy(true);
    setToken(t);
    try {
      await call("GET", "/v1/me");
      forgetMe();
      navigate("/tasks", true);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? "That key is not valid, has expired or was revoked." : String(err));
      setBusy(false);
    }
  };

  const next = new URLSearchParams(location.search).get("next") ?? "/tasks";
  return (
    <main id="main" class="login">
      <h1>engrams</h1>
      <p>Sign in to direct agent work.</p>
      {busy && !error && <p aria-live="polite">Signing in…</p>}
      <Problem error={error} />
      {oidc && (
        <p>
          <a class="button" id="sso" href={"/v1/auth/oidc/start?next=" + encodeURIComponent(next)}>
            Sign in with your identity provider
          </a>
        </p>
      )}
      <form onSubmit={useKey}>
        <label for="token">API key</label>
        <input id="token" type="password" autocomplete="off" value={pasted} onInput={(e) => setPasted(e.currentTarget.value)} placeholder="egr_…" />
        <button type="submit" disabled={busy}>
          Sign in with a key
        </button>
      </form>
      <p class="muted">
        <code>engrams dev</code> prints a login link that signs you in once; <code>engrams token create NAME</code> makes a key.
      </p>
    </main>
  );
}
