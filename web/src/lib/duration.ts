// Durations typed as the CLI takes them: "15m", "1h30m", "90s", "never";
// held by the API as whole seconds (-1: never, 0 or absent: the server's
// default).

const units: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };

/** parseSeconds reads a duration; undefined is empty (the server's
 * default), null is not a duration. Seconds round up, at least 1. */
export function parseSeconds(text: string): number | undefined | null {
  const t = text.trim().toLowerCase();
  if (t === "" || t === "0") return undefined;
  if (t === "never" || t === "none") return -1;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/y;
  let total = 0;
  let at = 0;
  while (at < t.length) {
    re.lastIndex = at;
    const m = re.exec(t);
    if (!m) return null;
    total += parseFloat(m[1]) * units[m[2]];
    at = re.lastIndex;
  }
  return total >= 1 ? Math.ceil(total) : null;
}

/** formatSeconds writes seconds as parseSeconds reads them ("" for the
 * server's default). */
export function formatSeconds(sec?: number): string {
  if (!sec) return "";
  if (sec < 0) return "never";
  const h = Math.floor(sec / 3600);
  const m = Math.floor((sec % 3600) / 60);
  const s = sec % 60;
  return (h ? h + "h" : "") + (m ? m + "m" : "") + (s ? s + "s" : "");
}
