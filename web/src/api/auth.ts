// How this browser is signed in: by a sign-in cookie (the identity
// provider or a login link; the credential itself is HttpOnly, and the
// readable engrams_csrf cookie goes back as X-Engrams-CSRF on writes), or
// by an API key pasted at sign-in, kept in localStorage and sent as a
// bearer token.
const key = "engrams.token";
const csrfCookie = "engrams_csrf";
export const csrfHeader = "X-Engrams-CSRF";

/** token is a pasted API key, if that is how this browser signed in. */
export function token(): string | null {
  return localStorage.getItem(key);
}

export function setToken(t: string): void {
  localStorage.setItem(key, t);
}

/** csrf is the sign-in cookie's anti-forgery token, if signed in by cookie. */
export function csrf(): string | null {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === csrfCookie && rest.length) return decodeURIComponent(rest.join("="));
  }
  return null;
}

export function signedIn(): boolean {
  return token() !== null || csrf() !== null;
}

/** forget drops what this browser holds (after a 401, the server refused it). */
export function forget(): void {
  localStorage.removeItem(key);
  document.cookie = csrfCookie + "=; Max-Age=0; Path=/";
}

/** signOut ends a cookie sign-in on the server (it is refused from then
 * on) and forgets a pasted key (it stays valid: it is the user's). */
export async function signOut(): Promise<void> {
  const c = csrf();
  if (c) await fetch("/v1/auth/signout", { method: "POST", headers: { [csrfHeader]: c } }).catch(() => undefined);
  forget();
}
