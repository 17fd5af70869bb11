// useTitle names the browser tab after the page, its most specific part
// first ("Changes · fix the login · Task · engrams"). It runs after the
// app's own title for the path, so the page's wins.
import { useEffect } from "preact/hooks";

export function useTitle(...parts: (string | undefined)[]): void {
  const title = [...parts.filter((p): p is string => !!p), "engrams"].join(" · ");
  useEffect(() => {
    document.title = title;
  });
}
