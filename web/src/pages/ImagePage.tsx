// One image: its state, live job progress (stage, bytes, time), the
// failure's output tail, and refresh and disable.
import { useEffect, useState } from "preact/hooks";
import { call, enc, get, listAll } from "../api/client";
import type { Image, ImageJob } from "../api/types";
import { ago, bytes, jobStage } from "../lib/format";
import { useTitle } from "../lib/title";
import { useLoad } from "../lib/useLoad";
import { Loading, Problem } from "../ui/Problem";
import { StateBadge } from "../ui/StateBadge";
import { isAdmin, useMe } from "../lib/useMe";

const steps = ["pending", "materializing", "capturing", "ready"];

export function ImagePage(props: { name: string }) {
  const admin = isAdmin(useMe());
  const img = useLoad((s) => get<Image>("/v1/images/" + enc(props.name), s), [props.name]);
  const jobs = useLoad((s) => listAll<ImageJob>("/v1/images/" + enc(props.name) + "/jobs", s), [props.name]);
  const [error, setError] = useState<Error>();
  const job = img.value?.last_job;
  useTitle("Image " + props.name);
  const live = job && job.state !== "ready" && job.state !== "failed";
  useEffect(() => {
    if (!live) return;
    const t = setInterval(() => {
      img.reload();
      jobs.reload();
    }, 700);
    return () => clearInterval(t);
  }, [live, img.reload, jobs.reload]);
  const act = (method: "POST" | "DELETE", path: string) =>
    call(method, "/v1/images/" + enc(props.name) + path).then(() => {
      img.reload();
      jobs.reload();
    }, setError);
  if (img.loading && !img.value) return <Loading what="the image" />;
  const i = img.value;
  return (
    <>
      <div class="head">
        <h1 class="title">Image {props.name}</h1>
        <div class="states">
          <StateBadge state={i?.state === "pending" ? "enabling" : i?.state} label="Image" />
          {admin && (
            <>
              <button onClick={() => act("POST", "/refresh")} disabled={!!live}>
                Refresh
              </button>
              <button class="danger" onClick={() => confirm("Disable " + props.name + "? Running sessions keep theirs.") && act("DELETE", "")}>
                Disable
              </button>
            </>
          )}
        </div>
      </div>
      <Problem error={img.error ?? error} />
      {i && (
        <dl class="facts">
          <dt>Reference</dt>
          <dd>
            <code>{i.ref}</code>
          </dd>
          <dt>Digest</dt>
          <dd>{i.digest ? <code>{i.digest}</code> : "not yet"}</dd>
          <dt>Runs with</dt>
          <dd>
            {i.config.memory_mib} MiB, {i.config.vcpus} vCPU, {i.config.disk_gib} GiB disk{i.config.libc ? ", " + i.config.libc : ""}
          </dd>
        </dl>
      )}
      {job && <JobProgress job={job} />}
      <h2>Jobs</h2>
      <table class="grid">
        <thead>
          <tr>
            <th scope="col">Kind</th>
            <th scope="col">State</th>
            <th scope="col">Started</th>
          </tr>
        </thead>
        <tbody>
          {[...(jobs.value?.items ?? [])].reverse().map((j) => (
            <tr>
              <td>{j.kind}</td>
              <td>{j.state}</td>
              <td>{ago(j.created_at)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

function JobProgress(props: { job: ImageJob }) {
  const j = props.job;
  const at = steps.indexOf(j.state);
  const pct = j.bytes_total > 0 ? Math.min(100, Math.round((100 * j.bytes_done) / j.bytes_total)) : undefined;
  const elapsed = (Date.parse(j.updated_at) - Date.parse(j.created_at)) / 1000;
  return (
    <section class="job" aria-label="Enable progress" data-testid="job-progress" data-state={j.state}>
      <ol class="stages">
        {steps.map((s, n) => (
          <li class={j.state === "failed" ? (n <= Math.max(at, 0) ? "failed" : "") : n < at ? "done" : n === at ? "current" : ""} aria-current={n === at ? "step" : undefined}>
            {s}
          </li>
        ))}
      </ol>
      <p data-testid="job-stage">
        {j.state}
        {j.stage ? " · " + jobStage(j.stage) : ""}
        {j.bytes_total > 0 ? " · " + bytes(j.bytes_done) + " of " + bytes(j.bytes_total) : j.bytes_done > 0 ? " · " + bytes(j.bytes_done) : ""} · {elapsed.toFixed(0)} s
      </p>
      {pct !== undefined && <progress max={100} value={pct} aria-label="Bytes done" />}
      {j.stages_ms && (
        <p class="muted small">
          {Object.entries(j.stages_ms)
            .map(([k, v]) => k + " " + (v / 1000).toFixed(1) + " s")
            .join(" · ")}
        </p>
      )}
      {j.error && <p class="problem">{j.error}</p>}
      {j.output_tail && (
        <details open>
          <summary>Warm-up output (last lines)</summary>
          <pre>{j.output_tail}</pre>
        </details>
      )}
      {(j.warnings ?? []).map((w) => (
        <p class="muted small">{w}</p>
      ))}
    </section>
  );
}
