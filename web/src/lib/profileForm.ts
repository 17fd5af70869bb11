// A profile spec as editable text fields, and back.
import type { ProfileRepo, ProfileSpec } from "../api/types";
import { formatSeconds, parseSeconds } from "./duration";

export type Form = {
  name: string;
  image: string;
  harness: string;
  model: string;
  mode: string;
  repos: ProfileRepo[]; // one row each, edited in place
  egress: string; // one per line
  env: string; // KEY=VALUE per line
  credentials: string[];
  idle: string; // a duration as the CLI takes it: 15m, 1h, never; empty: the server's default
};

export function toForm(name: string, s?: ProfileSpec): Form {
  return {
    name,
    image: s?.image ?? "",
    harness: s?.harness ?? "",
    model: s?.model ?? "",
    mode: s?.mode ?? "",
    repos: s?.repos ?? [],
    egress: (s?.egress ?? []).join("\n"),
    env: Object.entries(s?.env ?? {})
      .map(([k, v]) => k + "=" + v)
      .join("\n"),
    credentials: s?.credentials ?? [],
    idle: formatSeconds(s?.idle_timeout_s),
  };
}

const lines = (t: string) =>
  t
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);

export function toSpec(f: Form): ProfileSpec {
  const spec: ProfileSpec = { image: f.image, harness: f.harness };
  if (f.model) spec.model = f.model;
  if (f.mode) spec.mode = f.mode;
  // a row without a URL is one being added; empty fields are left out
  const repos = f.repos
    .filter((r) => r.url.trim() !== "")
    .map((r) => ({
      url: r.url.trim(),
      ...(r.ref ? { ref: r.ref } : {}),
      ...(r.path ? { path: r.path } : {}),
      ...(r.credential ? { credential: r.credential } : {}),
      ...(r.push ? { push: true } : {}),
      ...(r.api ? { api: true } : {}),
    }));
  if (repos.length) spec.repos = repos;
  const egress = lines(f.egress);
  if (egress.length) spec.egress = egress;
  const env: Record<string, string> = {};
  for (const l of lines(f.env)) {
    const i = l.indexOf("=");
    env[i < 0 ? l : l.slice(0, i)] = i < 0 ? "" : l.slice(i + 1);
  }
  if (Object.keys(env).length) spec.env = env;
  if (f.credentials.length) spec.credentials = f.credentials;
  const idle = parseSeconds(f.idle);
  if (typeof idle === "number") spec.idle_timeout_s = idle;
  return spec;
}
