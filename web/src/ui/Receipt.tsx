// A grant receipt: what a task started from the profile gets. A summary
// first (image, agent, where it can connect, which credentials and how
// each is delivered); how each part holds is folded below it.
import type { ComponentChildren } from "preact";
import type { Receipt } from "../api/types";

type Host = Receipt["hosts"][number];
type Credential = Receipt["credentials"][number];

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
      <dl class="receipt-summary">
        <dt>Image</dt>
        <dd>
          {r.image.name ? <Name text={r.image.name} /> : <em>none chosen</em>}{" "}
          {r.image.name && (r.image.digest ? <code class="muted">{r.image.digest.slice(0, 19)}</code> : <em>(not ready)</em>)}
        </dd>
        <dt>Agent</dt>
        <dd>
          {r.harness.name ? <Name text={r.harness.name + (r.harness.version ? "@" + r.harness.version : "")} /> : <em>none chosen</em>}
          {r.model ? ", model " + r.model : ""}
          {r.mode ? ", mode " + r.mode : ""}
        </dd>
        <dt>Connects to</dt>
        <dd>
          {r.hosts.length === 0 ? (
            "nothing: the VM has no network"
          ) : (
            <ul data-testid="receipt-hosts">
              {groups(r.hosts, (h) => (h.reachable ? via(h) : "not reachable")).map(([how, hs]) => (
                <li>
                  <span class="muted">{how}:</span> <Names hosts={hs} />
                </li>
              ))}
            </ul>
          )}
        </dd>
        <dt>Credentials</dt>
        <dd>
          {r.credentials.length === 0 ? (
            "none"
          ) : (
            <ul>
              {r.credentials.map((c) => (
                <li>
                  <Name text={c.name} bold /> <span class="muted">{delivery(c)}</span>
                </li>
              ))}
            </ul>
          )}
        </dd>
        {r.repos.length > 0 && (
          <>
            <dt>Repositories</dt>
            <dd>
              <ul data-testid="receipt-repos">
                {r.repos.map((p) => (
                  <li>
                    <Name text={p.path || p.url} code /> <span class="muted">{repoGrant(p)}</span>
                  </li>
                ))}
              </ul>
            </dd>
          </>
        )}
      </dl>
      <details class="receipt-details">
        <summary>How each part holds</summary>
        <Part title="What the agent can do">
          <ul>
            {r.powers.map((p) => (
              <li>{p}</li>
            ))}
          </ul>
        </Part>
        {r.hosts.length > 0 && (
          <Part title="How it reaches each host">
            <dl class="receipt-facts">
              {groups(r.hosts, (h) => h.reason + enforced(h)).map(([, hs]) => (
                <>
                  <dt>
                    <Names hosts={hs} />
                  </dt>
                  <dd>
                    <span class="muted">{[...new Set(hs.map((h) => h.why))].join("; ")}. </span>
                    {hs[0].reason}
                    {enforced(hs[0])}
                  </dd>
                </>
              ))}
            </dl>
          </Part>
        )}
        {r.credentials.length > 0 && (
          <Part title="How each credential is kept">
            <dl class="receipt-facts">
              {r.credentials.map((c) => (
                <>
                  <dt>
                    <Name text={c.name} bold /> <span class="muted">({c.kind})</span>
                  </dt>
                  <dd>{c.detail}</dd>
                </>
              ))}
            </dl>
          </Part>
        )}
        {r.repos.length > 0 && (
          <Part title="Repositories">
            <ul>
              {r.repos.map((p) => (
                <li>
                  <Name text={p.path || p.url} code />: <span class="url">{p.url}</span>
                  {p.ref ? " at " + p.ref : ", its default branch"}
                </li>
              ))}
            </ul>
          </Part>
        )}
        {r.enforcement && r.enforcement.length > 0 && (
          <Part title="What each backend enforces">
            <dl class="receipt-facts">
              {r.enforcement.map((e) => (
                <>
                  <dt>
                    <strong>{e.backend}</strong> <span class="muted">{e.enforced ? "enforced" : "not enforced"}</span>
                  </dt>
                  <dd>{e.how}</dd>
                </>
              ))}
            </dl>
          </Part>
        )}
      </details>
    </section>
  );
}

function Part(props: { title: string; children: ComponentChildren }) {
  return (
    <>
      <h3>{props.title}</h3>
      {props.children}
    </>
  );
}

/** Name shows a name whole: a line may break only after a dot, a slash
 * or an @, never inside a word. */
function Name(props: { text: string; code?: boolean; bold?: boolean }) {
  const parts = props.text.split(/(?<=[./@])/);
  const inner = parts.map((p, i) => (i < parts.length - 1 ? [p, <wbr />] : p));
  const el = props.code ? <code>{inner}</code> : props.bold ? <strong>{inner}</strong> : <>{inner}</>;
  return <span class="name">{el}</span>;
}

/** groups gathers items by a key, in the order of their first. */
function groups<T>(items: T[], key: (x: T) => string): [string, T[]][] {
  const m = new Map<string, T[]>();
  for (const x of items) m.set(key(x), [...(m.get(key(x)) ?? []), x]);
  return [...m];
}

function Names(props: { hosts: Host[] }) {
  return (
    <>
      {props.hosts.map((h, i) => (
        <>
          {i > 0 && ", "}
          <Name text={h.host} code />
        </>
      ))}
    </>
  );
}

function enforced(h: Host): string {
  return h.enforced_on && h.enforced_on.length > 0 ? ". Enforced on " + h.enforced_on.join(", ") + "." : ". Enforced nowhere.";
}

/** via says in a few words how the guest reaches a host. */
function via(h: Host): string {
  switch (h.via) {
    case "gateway":
      return "Through the model gateway, which adds the key";
    case "brokered":
      return "Through the credential broker, which adds the credential";
    default:
      return "Directly, through the egress proxy";
  }
}

/** delivery says in a few words how a credential is used. */
function delivery(c: Credential): string {
  switch (c.delivery) {
    case "gateway-injected":
      return "added by the model gateway" + (c.env ? "; the VM sees a placeholder in $" + c.env : "");
    case "coordinator-clone":
      return "clones the repositories outside the VM" + (c.detail.includes("credential broker") ? "; the broker adds it to the agent's git requests" : "");
    default:
      return "in the VM's environment" + (c.env ? " as $" + c.env : "");
  }
}

/** repoGrant says what the agent may do with a repository's host. */
function repoGrant(p: Receipt["repos"][number]): string {
  if (!p.credential) return "cloned without a credential";
  if (!p.url.startsWith("https://")) return "cloned with " + p.credential;
  return "may fetch" + (p.push ? ", push" : "") + (p.api ? ", call its REST API" : "");
}
