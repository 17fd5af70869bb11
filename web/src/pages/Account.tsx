// Account: who this browser is signed in as, your keys (revoke one), and
// your accounts in Slack, GitHub and Linear (link one with a code said
// there: a Slack mention, or a comment; a GitHub code is for one login).
import { useState } from "preact/hooks";
import { del, enc, get, listAll, post, type Page } from "../api/client";
import type { Identity, IdentityLink, Token } from "../api/types";
import { ago } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { useMe } from "../lib/useMe";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";

export function Account() {
  const me = useMe();
  const keys = useLoad((s) => listAll<Token>("/v1/tokens", s), []);
  const ids = useLoad((s) => get<Page<Identity>>("/v1/me/identities", s), []);
  const [link, setLink] = useState<IdentityLink>();
  const [login, setLogin] = useState("");
  const [error, setError] = useState<Error>();
  const mine = (keys.value?.items ?? []).filter((k) => k.user_id === me?.user_id && k.kind !== "host");
  const revoke = (k: Token) =>
    confirm("Revoke key " + k.name + "? Whatever uses it stops at once.") && del("/v1/tokens/" + enc(k.id)).then(keys.reload, setError);
  const linkAccount = (kind: "slack" | "github" | "linear", account?: string) =>
    post<IdentityLink>("/v1/me/identities", { kind, account }).then(setLink, setError);
  return (
    <>
      <h1>Account</h1>
      <p data-testid="whoami">
        {me ? (
          <>
            Signed in as <strong>{me.name}</strong>
            {me.org_name ? <> in {me.org_name}</> : null}
            {me.role ? <>, {me.role}</> : null}
            {me.fleet_operator ? <>, fleet operator</> : null}.
          </>
        ) : (
          "…"
        )}
      </p>
      <Problem error={error} what="Could not do that" />
      <h2>Your keys</h2>
      <Table
        what="keys"
        rows={keys.value ? mine : undefined}
        loading={keys.loading}
        error={keys.error}
        testid="key-list"
        empty={
          <>
            No keys. Make one with <code>engrams token create NAME</code>.
          </>
        }
        columns={[
          { head: "Name", cell: (k) => k.name },
          { head: "Kind", cell: (k) => (k.kind === "signin" ? "sign-in" : k.kind) },
          { head: "Role", wide: true, cell: (k) => k.role ?? "" },
          { head: "Last used", wide: true, cell: (k) => (k.last_used_at && !k.last_used_at.startsWith("0001") ? ago(k.last_used_at) : "never") },
          {
            head: "Actions",
            hidden: true,
            cell: (k) => (
              <button class="quiet danger" onClick={() => revoke(k)}>
                Revoke
              </button>
            ),
          },
        ]}
      />
      <h2>Slack, GitHub and Linear</h2>
      <p class="hint">
        A Slack mention or an @engrams comment on a pull request starts a task as you, and your pull requests and Linear issues start
        tasks that are yours, when the account is yours here: in Slack, the same email confirmed there; anywhere, linked with a code.
      </p>
      <Table
        what="accounts"
        rows={ids.value?.items}
        loading={ids.loading}
        error={ids.error}
        testid="identity-list"
        empty="No account is yours yet."
        columns={[
          { head: "Where", cell: (i) => (i.kind === "github" ? "GitHub" : i.kind === "linear" ? "Linear" : "Slack") },
          { head: "Account", cell: (i) => i.account },
          { head: "How", cell: (i) => (i.how === "email" ? "by email" : "linked") },
          { head: "Since", wide: true, cell: (i) => ago(i.created_at) },
        ]}
      />
      {link ? (
        <p data-testid="link-code">
          Code <code>{link.code}</code>: {link.say}.
        </p>
      ) : (
        <p>
          <button type="button" onClick={() => linkAccount("slack")}>
            Link a Slack account
          </button>{" "}
          <button type="button" onClick={() => linkAccount("linear")}>
            Link a Linear account
          </button>{" "}
          <input placeholder="GitHub login" value={login} onInput={(e) => setLogin(e.currentTarget.value)} aria-label="GitHub login" />{" "}
          <button type="button" disabled={!login.trim()} onClick={() => linkAccount("github", login.trim())}>
            Link a GitHub account
          </button>
        </p>
      )}
    </>
  );
}
