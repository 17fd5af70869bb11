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
};

export function jobStage(stage: string): string {
  return stageWords[stage] ?? stage;
}
