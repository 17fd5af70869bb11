// A run: its state, trigger and inputs, and the timeline of its steps
// (each block it executed), each with its detail; live until it ends.
import { useEffect } from "preact/hooks";
import { enc, get } from "../api/client";
import type { RunDetail, RunStep } from "../api/types";
import { ago } from "../lib/format";
import { useTitle } from "../lib/title";
import { useLoad } from "../lib/useLoad";
import { Loading, Problem } from "../ui/Problem";
import { StateBadge } from "../ui/StateBadge";
import { took } from "./AutomationRuns";

const ended = new Set(["succeeded", "failed", "cancelled", "superseded", "skipped", "refused"]);

export function Run(props: { id: string }) {
  const run = useLoad((s) => get<RunDetail>("/v1/runs/" + enc(props.id), s), [props.id]);
  const done = run.value ? ended.has(run.value.state) : false;
  useTitle(run.value ? "Run of " + run.value.automation : "Run");
  useEffect(() => {
    if (done) return;
    const t = setInterval(run.reload, 1000);
    return () => clearInterval(t);
  }, [done, run.reload]);
  if (!run.value) return run.error ? <Problem error={run.error} what="Could not read the run" /> : <Loading what="the run" />;
  const r = run.value;
  const total = Math.max(1, ...r.steps.map((s) => s.duration_ms ?? 0));
  return (
    <>
      <div class="head">
        <h1 class="title">
          Run of <a href={"/automations/" + enc(r.automation)}>{r.automation}</a>
        </h1>
        <StateBadge state={r.state} label="Run" prefix />
      </div>
      <p class="muted">
        Version {r.version} · {r.trigger} · started {ago(r.created_at)}
        {took(r) ? " · took " + took(r) : ""}
      </p>
      {r.error && <p class="problem">{r.error}</p>}
      <details>
        <summary>Trigger payload and inputs</summary>
        <pre>{JSON.stringify({ payload: r.payload, inputs: r.inputs }, null, 2)}</pre>
      </details>
      <h2>Steps</h2>
      {r.steps.length === 0 ? (
        <p class="empty">{done ? "No step ran." : "No step has run yet."}</p>
      ) : (
        <ol class="timeline" data-testid="step-timeline">
          {r.steps.map((s) => (
            <Step step={s} total={total} />
          ))}
        </ol>
      )}
    </>
  );
}

function Step(props: { step: RunStep; total: number }) {
  const s = props.step;
  const width = Math.max(2, Math.round(((s.duration_ms ?? 0) / props.total) * 100));
  return (
    <li class={"step " + s.state} data-testid="step" data-block={s.block} data-state={s.state}>
      <details>
        <summary>
          <span class="step-seq">{s.seq}</span> <code>{s.path}</code> <strong>{s.block}</strong> <span class="muted">{s.kind}</span>{" "}
          <StateBadge state={s.state} label="Step" />
          {s.attempt > 1 && <span class="badge busy">attempt {s.attempt}</span>}
          <span class="muted small"> {s.ended_at ? (s.duration_ms ?? 0) + " ms" : "running"}</span>
          <span class="step-track" aria-hidden="true">
            <span class="step-bar" style={{ width: width + "%" }} />
          </span>
        </summary>
        <h3 class="small">Input</h3>
        <pre>{JSON.stringify(s.input ?? {}, null, 2)}</pre>
        {s.output && (
          <>
            <h3 class="small">Output</h3>
            {s.kind === "start_task" && s.state === "succeeded" ? (
              <p data-testid="step-output">
                Started task <a href={"/tasks/" + enc(s.output)}>{s.output}</a>
              </p>
            ) : (
              <pre data-testid="step-output">{s.output}</pre>
            )}
          </>
        )}
        {s.error && <p class="problem">{s.error}</p>}
      </details>
    </li>
  );
}
