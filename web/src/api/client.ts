// A typed fetch over the public API: the bearer key or the sign-in
// cookie's anti-forgery header, JSON both ways, errors as ApiError (the
// server's Error body), 401 signs the browser out.
import { csrf, csrfHeader, forget, token } from "./auth";
import type { ApiErrorBody } from "./types";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

export function headers(extra?: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  const t = token();
  const c = csrf();
  if (t) h["Authorization"] = "Bearer " + t;
  else if (c) h[csrfHeader] = c; // a write signed in by cookie carries it
  return h;
}

async function failure(resp: Response): Promise<ApiError> {
  let body: ApiErrorBody | undefined;
  try {
    body = (await resp.json()) as ApiErrorBody;
  } catch {
    body = undefined;
  }
  if (resp.status === 401) {
    forget();
    window.dispatchEvent(new Event("engrams:signed-out"));
  }
  return new ApiError(resp.status, body?.code ?? "http_" + resp.status, body?.error ?? resp.statusText);
}

/** call sends one request; a POST gets an Idempotency-Key unless given one. */
export async function call<T>(method: Method, path: string, body?: unknown, init?: { signal?: AbortSignal; idempotencyKey?: string }): Promise<T> {
  const extra: Record<string, string> = {};
  if (body !== undefined) extra["Content-Type"] = "application/json";
  if (method === "POST") extra["Idempotency-Key"] = init?.idempotencyKey ?? crypto.randomUUID();
  const resp = await fetch(path, {
    method,
    headers: headers(extra),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: init?.signal,
  });
  if (!resp.ok) throw await failure(resp);
  if (resp.status === 204) return undefined as T;
  const type = resp.headers.get("Content-Type") ?? "";
  return (type.includes("json") ? await resp.json() : await resp.text()) as T;
}

export const get = <T>(path: string, signal?: AbortSignal) => call<T>("GET", path, undefined, { signal });
export const post = <T>(path: string, body?: unknown) => call<T>("POST", path, body ?? {});
export const del = <T>(path: string) => call<T>("DELETE", path);

/** q builds a query string from the defined values. */
export function q(params: Record<string, string | number | boolean | undefined>): string {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") u.set(k, String(v));
  const s = u.toString();
  return s ? "?" + s : "";
}

export function enc(s: string): string {
  return encodeURIComponent(s);
}

/** Page is what every list route answers: its items ([] when none) and the
 * ?cursor= of the next page ("" on the last). */
export type Page<T> = { items: T[]; next_cursor: string };

/** listAll reads every page of a list (500 at a time, following next_cursor). */
export async function listAll<T>(path: string, signal?: AbortSignal): Promise<Page<T>> {
  const items: T[] = [];
  let cursor = "";
  for (let i = 0; i < 200; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const page = await get<Page<T>>(path + sep + "limit=500" + (cursor ? "&cursor=" + enc(cursor) : ""), signal);
    items.push(...(page.items ?? []));
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  return { items, next_cursor: "" };
}
