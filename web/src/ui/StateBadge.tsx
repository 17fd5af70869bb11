// A session's or task's state as a labelled badge.
const tone: Record<string, string> = {
  active: "ok",
  running: "ok",
  idle: "idle",
  suspending: "busy",
  resuming: "busy",
  creating: "busy",
  starting: "busy",
  ready: "ok",
  new: "busy",
  draining: "busy",
  disabled: "off",
  pending: "busy",
  enabling: "busy",
  failed: "bad",
  lost: "bad",
  stopped: "off",
  deleted: "off",
  deleting: "busy",
  queued: "busy",
  waiting: "idle",
  succeeded: "ok",
  cancelled: "off",
  superseded: "off",
  skipped: "off",
  refused: "bad",
};

export function StateBadge(props: { state?: string; label?: string; prefix?: boolean }) {
  const s = props.state ?? "unknown";
  const word = s.charAt(0).toUpperCase() + s.slice(1);
  return (
    <span class={"badge " + (tone[s] ?? "off")} data-state={s} aria-label={(props.label ?? "State") + ": " + word}>
      {props.prefix && props.label ? <span class="badge-label">{props.label} </span> : null}
      {word}
    </span>
  );
}
