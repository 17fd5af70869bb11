// A grant receipt: what a task started from the profile gets.
import type { Receipt } from "../api/types";

export function ReceiptView(props: { receipt?: Receipt; problems?: string[] }) {
  const r = props.receipt;
  if (!r) return null;
  return (
    <section class="receipt" aria-label="Grant receipt">
      <h2 class="receipt-title">What the agent will be granted</h2>
      {props.problems && props.problems.length > 0 && (
        <ul class="problems" aria-label="Problems">
          {props.problems.map((p) => (
            <li>{p}</li>
          ))}
        </ul>
      )}
      <dl>
        <dt>Image</dt>
        <dd>
          {r.image.name} {r.image.digest ? <code>{r.image.digest.slice(0, 19)}</code> : <em>(not ready)</em>}
        </dd>
        <dt>Harness</dt>
        <dd>
          {r.harness.name}
          {r.harness.version ? "@" + r.harness.version : ""} {r.model ? "· model " + r.model : ""} {r.mode ? "· mode " + r.mode : ""}
        </dd>
      </dl>
      <h3>Powers</h3>
      <ul>
        {r.powers.map((p) => (
          <li>{p}</li>
        ))}
      </ul>
      <h3>Reachable hosts</h3>
      {r.hosts.length === 0 ? (
        <p class="muted">None: the guest has no network.</p>
      ) : (
        <table class="grid" data-testid="receipt-hosts">
          <thead>
            <tr>
              <th scope="col">Host</th>
              <th scope="col">Via</th>
              <th scope="col">Enforced on</th>
              <th scope="col" class="wide">
                Why
              </th>
            </tr>
          </thead>
          <tbody>
            {r.hosts.map((h) => (
              <tr>
                <td>
                  <code>{h.host}</code>
                </td>
                <td>{h.reachable ? (h.via ?? "proxy") : "not reachable"}</td>
                <td>{h.enforced_on && h.enforced_on.length > 0 ? h.enforced_on.join(", ") : "nowhere"}</td>
                <td class="wide">{h.why}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h3>Credentials</h3>
      {r.credentials.length === 0 ? (
        <p class="muted">None.</p>
      ) : (
        <ul>
          {r.credentials.map((c) => (
            <li>
              <strong>{c.name}</strong> ({c.kind}): {c.delivery}
              {c.env ? ", as $" + c.env : ""}. <span class="muted">{c.detail}</span>
            </li>
          ))}
        </ul>
      )}
      {r.repos.length > 0 && (
        <>
          <h3>Repositories</h3>
          <ul data-testid="receipt-repos">
            {r.repos.map((p) => (
              <li>
                <code>{p.path || p.url}</code> {p.url}
                {p.ref ? " at " + p.ref : ""}
                {p.credential && p.url.startsWith("https://") ? ": the agent may fetch" + (p.push ? ", push" : "") + (p.api ? ", call its REST API" : "") + " through the credential broker" : ""}
              </li>
            ))}
          </ul>
        </>
      )}
      {r.enforcement && r.enforcement.length > 0 && (
        <>
          <h3>Enforcement by backend</h3>
          <ul>
            {r.enforcement.map((e) => (
              <li>
                <strong>{e.backend}</strong>: {e.enforced ? "enforced" : "not enforced"}. <span class="muted">{e.how}</span>
              </li>
            ))}
          </ul>
        </>
      )}
    </section>
  );
}
