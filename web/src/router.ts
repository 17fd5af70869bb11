// A small history router: every page has a URL (deep links), links
// navigate without reloading, and the back button works.
import { useEffect, useState } from "preact/hooks";

export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  window.dispatchEvent(new Event("engrams:navigate"));
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname + location.search);
  useEffect(() => {
    const on = () => setPath(location.pathname + location.search);
    window.addEventListener("popstate", on);
    window.addEventListener("engrams:navigate", on);
    return () => {
      window.removeEventListener("popstate", on);
      window.removeEventListener("engrams:navigate", on);
    };
  }, []);
  return path;
}

/** match returns the named segments of path if it fits pattern ("/tasks/:id"). */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split("/");
  const s = path.split("?")[0].split("/");
  if (p.length !== s.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(":")) out[p[i].slice(1)] = decodeURIComponent(s[i]);
    else if (p[i] !== s[i]) return null;
  }
  return out;
}

/** onLinkClick turns clicks on same-origin links to the app's pages into
 * navigations; links into the API (/v1/: sign-in, downloads) load. */
export function onLinkClick(e: MouseEvent): void {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = (e.target as Element).closest("a");
  if (!a || a.target || a.hasAttribute("download") || a.origin !== location.origin || a.pathname.startsWith("/v1/")) return;
  e.preventDefault();
  navigate(a.pathname + a.search);
}
