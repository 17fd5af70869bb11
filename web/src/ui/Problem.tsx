// An error in place: what failed and the server's reason.
export function Problem(props: { error?: Error | string; what?: string }) {
  if (!props.error) return null;
  const msg = typeof props.error === "string" ? props.error : props.error.message;
  return (
    <p class="problem" role="alert">
      {props.what ? props.what + ": " : ""}
      {msg}
    </p>
  );
}

export function Loading(props: { what: string }) {
  return (
    <p class="muted" aria-live="polite">
      Loading {props.what}…
    </p>
  );
}
