// The profile editor: the form (with who may use the profile, for
// admins), and beside it the grant receipt of what is typed, resolved live
// (before saving); problems show on their field.
import { useEffect, useState } from "preact/hooks";
import { call, enc, get, listAll } from "../api/client";
import type { CreateProfileRequest, Harness, Image, ProfileResponse, Receipt, Secret, UpdateProfileRequest } from "../api/types";
import { byField, type Field } from "../lib/problems";
import { parseSeconds } from "../lib/duration";
import { everyone, grantLabels, toGrants, toWho, type Who } from "../lib/grants";
import { toForm, toSpec, type Form } from "../lib/profileForm";
import { useTitle } from "../lib/title";
import { useLoad } from "../lib/useLoad";
import { navigate } from "../router";
import { FieldProblems, Row } from "../ui/Field";
import { Loading, Problem } from "../ui/Problem";
import { ReceiptView } from "../ui/Receipt";
import { ProfileGrants } from "./ProfileGrants";
import { ProfileRepos } from "./ProfileRepos";
import { isAdmin, useMe } from "../lib/useMe";
import { useMembers } from "../lib/useMembers";

export function ProfileEditor(props: { name?: string }) {
  const existing = useLoad((s) => (props.name ? get<ProfileResponse>("/v1/profiles/" + enc(props.name), s) : Promise.resolve(undefined)), [props.name]);
  const images = useLoad((s) => listAll<Image>("/v1/images", s), []);
  const harnesses = useLoad((s) => listAll<Harness>("/v1/harnesses", s), []);
  const me = useMe();
  const admin = isAdmin(me);
  const members = useMembers(admin);
  // Secrets are an admin's to list; a member reads the profile as it is.
  const secrets = useLoad((s) => (admin ? listAll<Secret>("/v1/secrets", s) : Promise.resolve({ items: [] as Secret[], next_cursor: "" })), [admin]);
  const [form, setForm] = useState<Form>(toForm(""));
  const [who, setWho] = useState<Who>(everyone);
  const [preview, setPreview] = useState<{ receipt: Receipt; problems: string[] }>();
  const [error, setError] = useState<Error>();
  const [saving, setSaving] = useState(false);
  // Problems show on a field once it was changed, or all after a save.
  const [touched, setTouched] = useState<Set<string>>(new Set());
  const [submitted, setSubmitted] = useState(false);

  useEffect(() => {
    if (!existing.value) return;
    setForm(toForm(existing.value.profile.name, existing.value.profile.spec));
    setWho(toWho(existing.value.profile.grants));
  }, [existing.value]);
  useEffect(() => {
    // A member reads the receipt the profile has now; previewing an edit
    // (which says what the secrets it names are) is a curator's.
    if (!admin) {
      if (existing.value) setPreview({ receipt: existing.value.receipt, problems: existing.value.problems ?? [] });
      return;
    }
    const t = setTimeout(() => {
      call<{ receipt: Receipt; problems: string[] }>("POST", "/v1/profiles/receipt", { spec: toSpec(form) }).then(setPreview, setError);
    }, 250);
    return () => clearTimeout(t);
  }, [form, admin, existing.value]);

  const set = (k: keyof Form) => (e: Event) => {
    setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });
    setTouched((t) => new Set(t).add(k));
  };
  const all = byField(preview?.problems ?? []);
  const fieldOfForm: Record<string, string> = { egress: "egress", repos: "repos", env: "env", image: "image", harness: "harness", model: "model", name: "name", idle_timeout_s: "idle", credentials: "credentials" };
  const probs = new Map([...all].filter(([f]) => submitted || !!props.name || touched.has(fieldOfForm[f] ?? f) || f === "other"));
  const idleBad = parseSeconds(form.idle) === null ? ["want a duration such as 15m or 1h30m, or never"] : [];
  useTitle(props.name ? "Profile " + props.name : "New profile");
  const save = async (e: Event) => {
    e.preventDefault();
    setSubmitted(true);
    if (idleBad.length > 0) return;
    setSaving(true);
    setError(undefined);
    try {
      const grants = toGrants(who); // all of them: an edit replaces the profile's grants
      const update: UpdateProfileRequest = { spec: toSpec(form), grants, version: existing.value?.profile.version ?? 0 };
      const create: CreateProfileRequest = { name: form.name, spec: toSpec(form), grants };
      const r = props.name
        ? await call<ProfileResponse>("PUT", "/v1/profiles/" + enc(props.name), update)
        : await call<ProfileResponse>("POST", "/v1/profiles", create);
      navigate("/profiles/" + enc(r.profile.name), true);
      existing.set(r);
    } catch (err) {
      setError(err as Error);
    } finally {
      setSaving(false);
    }
  };
  if (props.name && existing.loading && !existing.value) return <Loading what="the profile" />;
  const harness = harnesses.value?.items.find((h) => h.name === form.harness.split("@")[0]);

  return (
    <>
      <h1>{props.name ? "Profile " + props.name : "New profile"}</h1>
      <div class="split">
        <form class="editor" onSubmit={save} noValidate>
          {!props.name && (
            <Row id="p-name" label="Name" problems={probs.get("name")}>
              <input id="p-name" value={form.name} onInput={set("name")} required aria-describedby="p-name-err" />
            </Row>
          )}
          <Row id="p-image" label="Image" problems={probs.get("image")}>
            <select id="p-image" value={form.image} onChange={set("image")}>
              <option value="">choose…</option>
              {(images.value?.items ?? []).map((i) => (
                <option value={i.name}>{i.name}</option>
              ))}
            </select>
          </Row>
          <Row id="p-harness" label="Harness" problems={probs.get("harness")}>
            <select id="p-harness" value={form.harness} onChange={set("harness")}>
              <option value="">choose…</option>
              {(harnesses.value?.items ?? []).map((h) => (
                <option value={h.name}>
                  {h.name} {h.version}
                </option>
              ))}
            </select>
          </Row>
          <Row id="p-model" label="Model" problems={probs.get("model")} hint={harness?.models?.length ? "Offered: " + harness.models.join(", ") : undefined}>
            <input id="p-model" value={form.model} onInput={set("model")} placeholder="the harness's default" />
          </Row>
          <ProfileRepos
            repos={form.repos}
            secrets={secrets.value?.items ?? []}
            problems={probs.get("repos")}
            onChange={(repos) => {
              setForm({ ...form, repos });
              setTouched((t) => new Set(t).add("repos"));
            }}
          />
          <Row id="p-egress" label="Allowed hosts" problems={probs.get("egress")} hint="One per line: host[:port] or *.suffix[:port]; port 443 when none">
            <textarea id="p-egress" rows={4} value={form.egress} onInput={set("egress")} />
          </Row>
          <Row id="p-env" label="Environment" problems={probs.get("env")} hint="KEY=value per line (not secret)">
            <textarea id="p-env" rows={3} value={form.env} onInput={set("env")} />
          </Row>
          <fieldset aria-describedby={probs.get("credentials") ? "p-creds-err" : undefined}>
            <legend>Model credentials</legend>
            {(secrets.value?.items ?? []).length === 0 && <p class="muted small">No secrets yet.</p>}
            {(secrets.value?.items ?? []).map((s) => (
              <label class="check">
                <input
                  type="checkbox"
                  checked={form.credentials.includes(s.name)}
                  onChange={(e) => {
                    setForm({ ...form, credentials: e.currentTarget.checked ? [...form.credentials, s.name] : form.credentials.filter((c) => c !== s.name) });
                    setTouched((t) => new Set(t).add("credentials"));
                  }}
                />
                {s.name} <span class="muted small">({s.kind})</span>
              </label>
            ))}
            <FieldProblems id="p-creds-err" problems={probs.get("credentials")} />
          </fieldset>
          <Row id="p-idle" label="Idle timeout" problems={[...idleBad, ...(probs.get("idle_timeout_s") ?? [])]} hint="Suspend a task's session after this long unused, e.g. 15m or 1h; never: do not; empty: the server's default">
            <input id="p-idle" value={form.idle} onInput={set("idle")} placeholder="server default" spellcheck={false} />
          </Row>
          {admin ? (
            <ProfileGrants who={who} members={members.value?.items ?? []} onChange={setWho} />
          ) : (
            existing.value && (
              <p data-testid="profile-who">
                Who may use it: {grantLabels(existing.value.profile.grants, { members: [], me: me?.user_id }).join(", ")}
              </p>
            )
          )}
          <FieldProblems id="p-other" problems={probs.get("other" as Field)} />
          <Problem error={error} what="Could not save" />
          {admin ? (
            <button type="submit" disabled={saving}>
              {saving ? "Saving…" : props.name ? "Save" : "Create profile"}
            </button>
          ) : (
            me && <p class="hint">Only admins change profiles.</p>
          )}
        </form>
        <div class="side" aria-live="polite">
          <ReceiptView receipt={preview?.receipt} />
        </div>
      </div>
    </>
  );
}
