// Small formatters shared by the pages.
export function ago(iso?: string): string {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

export function bytes(n?: number): string {
  if (n === undefined) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n : n.toFixed(1)) + " " + u[i];
}

export function short(id?: string): string {
  return id ? id.slice(0, 13) : "";
}

export type Money = { amount: string; micros: number; currency: string };

/** money formats an exact amount: cents from 1 up ("$1,234.57"), two
 * significant digits below ("$0.46", "$0.0046", "$0.0001"), the currency's
 * code after the amount when it is not USD ("0.46 EUR"). No amount is "–". */
export function money(m?: Money | null): string {
  if (!m || !m.currency) return "–";
  const neg = m.micros < 0;
  const u = Math.abs(m.micros);
  let s: string;
  if (u >= 1_000_000) {
    const cents = Math.floor((u + 5_000) / 10_000);
    s = Math.floor(cents / 100).toLocaleString("en-US") + "." + String(cents % 100).padStart(2, "0");
  } else {
    let d = 2;
    let v = 0;
    for (; d <= 6; d++) {
      const unit = 10 ** (6 - d);
      v = Math.floor((u + unit / 2) / unit);
      if (v >= 10 || d === 6) break;
    }
    if (v >= 10 ** d) s = Math.floor(v / 10 ** d) + ".00";
    else {
      const digits = String(v).padStart(d + 1, "0");
      let frac = digits.slice(-d).replace(/0+$/, "");
      if (frac.length < 2) frac = frac.padEnd(2, "0");
      s = digits.slice(0, -d) + "." + frac;
    }
  }
  if (m.currency === "USD") return (neg ? "-$" : "$") + s;
  return (neg ? "-" : "") + s + " " + m.currency;
}

/** count is a whole number with thousands separators. */
export function count(n?: number): string {
  return (n ?? 0).toLocaleString("en-US");
}

export type Tokens = { input_tokens: number; output_tokens: number; cache_read_tokens: number; cache_write_tokens: number };

/** tokens says input (with its cached parts) and output tokens. */
export function tokens(u: Tokens): string {
  let s = count(u.input_tokens) + " in";
  if (u.cache_read_tokens || u.cache_write_tokens)
    s += ` (${count(u.cache_read_tokens)} cache read, ${count(u.cache_write_tokens)} cache write)`;
  return s + ", " + count(u.output_tokens) + " out";
}

/** when is a timestamp for a person: local date and time. */
export function when(iso?: string): string {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d.getTime()) ? "" : d.toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" });
}

/** opKind is a session operation's kind in the words the user sees
 * elsewhere (the API's evict is the CLI's and the button's suspend). */
export function opKind(kind: string): string {
  return kind === "evict" ? "suspend" : kind;
}

// What an image job's stage is doing, said once (not "capturing · capture").
const stageWords: Record<string, string> = {
  resolve: "reading the manifest",
  pull: "downloading layers",
  rootfs: "building the disk",
  chunks: "storing the disk",
  place: "finding a host",
  capture: "booting, warming up and saving the snapshot",
  on_host: "waiting on the capture host",
  fetch_rootfs: "fetching the disk to the host",
  boot: "booting",
  warmup: "warming up",
  snapshot: "saving the snapshot",
  upload: "uploading the snapshot",
};

export function jobStage(stage: string): string {
  return stageWords[stage] ?? stage;
}

/** isZero says iso is absent or Go's zero time (what "never" is on the wire). */
export function isZero(iso?: string): boolean {
  return !iso || iso.startsWith("0001-");
}

/** expires says when a key stops working: never, expired, or in how long. */
export function expires(iso?: string): string {
  if (isZero(iso)) return "never";
  const s = (Date.parse(iso as string) - Date.now()) / 1000;
  if (s <= 0) return "expired";
  if (s < 3600) return "in " + Math.ceil(s / 60) + "m";
  if (s < 86400) return "in " + Math.floor(s / 3600) + "h";
  return "in " + Math.floor(s / 86400) + "d";
}
