// The browser's API token: kept in localStorage, sent as a bearer token.
// A token this browser's sign-in minted (a login link) is revoked at sign
// out; a pasted one is the user's and only forgotten.
const key = "engrams.token";
const mintedKey = "engrams.token.minted"; // the id of the key a sign-in minted

export function token(): string | null {
  return localStorage.getItem(key);
}

/** mintedID is the key's id when this browser's sign-in made it. */
export function setToken(t: string, mintedID?: string): void {
  localStorage.setItem(key, t);
  if (mintedID) localStorage.setItem(mintedKey, mintedID);
  else localStorage.removeItem(mintedKey);
}

/** mintedKeyID is the id of the key to revoke at sign out, if any. */
export function mintedKeyID(): string | null {
  return localStorage.getItem(mintedKey);
}

export function signOut(): void {
  localStorage.removeItem(key);
  localStorage.removeItem(mintedKey);
}
