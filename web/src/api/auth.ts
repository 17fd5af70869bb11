// The browser's API token: kept in localStorage, sent as a bearer token.
const key = "engrams.token";

export function token(): string | null {
  return localStorage.getItem(key);
}

export function setToken(t: string): void {
  localStorage.setItem(key, t);
}

export function signOut(): void {
  localStorage.removeItem(key);
}
