// What the task page says of a task under its title: its profile, model,
// who started it, when, and the tokens its turns used with their cost.
import { useEffect, useState } from "preact/hooks";
import { enc, get } from "../api/client";
import type { ProfileResponse, Task } from "../api/types";
import { ago, money, tokens, when } from "../lib/format";

export function TaskMeta(props: { task: Task }) {
  const t = props.task;
  const [profile, setProfile] = useState<string>();
  useEffect(() => {
    setProfile(undefined);
    get<ProfileResponse>("/v1/profiles/" + enc(t.profile_id)).then(
      (p) => setProfile(p.profile.name),
      () => setProfile(undefined),
    );
  }, [t.profile_id]);
  const u = t.usage;
  const finished = t.state === "stopped" || t.state === "failed";
  const stamp = (iso: string) => (
    <time dateTime={iso} title={iso}>
      {when(iso)} <span class="muted">({ago(iso)})</span>
    </time>
  );
  return (
    <>
      <dl class="task-meta" data-testid="task-meta">
        <div>
          <dt>Profile</dt>
          <dd>
            <a href={"/profiles/" + enc(profile ?? t.profile_id)}>{profile ?? t.profile_id.slice(0, 8)}</a>{" "}
            <span class="muted">v{t.profile_version}</span>
          </dd>
        </div>
        <div>
          <dt>Model</dt>
          <dd data-testid="task-model">{u.model || t.receipt?.model || "the harness's default"}</dd>
        </div>
        <div>
          <dt>Started by</dt>
          <dd data-testid="task-started-by">
            {t.run_id ? (
              <a href={"/runs/" + enc(t.run_id)}>an automation run</a>
            ) : t.started_by ? (
              <>
                token <code>{t.started_by}</code>
              </>
            ) : (
              "a user"
            )}
          </dd>
        </div>
        <div>
          <dt>Created</dt>
          <dd>{stamp(t.created_at)}</dd>
        </div>
        <div>
          <dt>{finished ? "Finished" : "Updated"}</dt>
          <dd>{stamp(t.updated_at)}</dd>
        </div>
      </dl>
      <dl class="task-meta" data-testid="task-usage">
        <div>
          <dt>Cost</dt>
          <dd data-testid="task-cost">
            {money(u.cost)}
            {u.unpriced_usages ? <span class="muted"> (+{u.unpriced_usages} not priced)</span> : null}
          </dd>
        </div>
        <div>
          <dt>Tokens</dt>
          <dd data-testid="task-tokens">{tokens(u)}</dd>
        </div>
      </dl>
    </>
  );
}
