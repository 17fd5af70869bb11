// Server-Sent Events over fetch (EventSource cannot send the bearer
// token): each message's id is kept, and a dropped stream reconnects with
// Last-Event-ID after a short backoff, so no event is missed or repeated.
import { headers } from "./client";

export type Message = { id?: string; event: string; data: string };

export type Follow = { stop(): void };

export function follow(path: string, onMessage: (m: Message) => void, opts: { after?: number; onState?: (live: boolean) => void } = {}): Follow {
  const ctl = new AbortController();
  let last = opts.after !== undefined ? String(opts.after) : undefined;
  let done = false;
  const run = async () => {
    let backoff = 500;
    while (!done) {
      try {
        const h = headers({ Accept: "text/event-stream" });
        if (last !== undefined) h["Last-Event-ID"] = last;
        const resp = await fetch(path, { headers: h, signal: ctl.signal });
        if (resp.status === 401 || resp.status === 404) {
          opts.onState?.(false);
          return;
        }
        if (!resp.ok || !resp.body) throw new Error("stream: " + resp.status);
        opts.onState?.(true);
        backoff = 500;
        const ended = await read(resp.body, (m) => {
          if (m.id !== undefined) last = m.id;
          onMessage(m);
        });
        if (ended) return;
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      opts.onState?.(false);
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 8000);
    }
  };
  void run();
  return {
    stop() {
      done = true;
      ctl.abort();
    },
  };
}

/**
 * backlog reads a stream that ends by itself (a session's events with
 * ?follow=false): every message in it, once. Unlike follow it never
 * subscribes, so reading an idle session's events does not resume it.
 */
export async function backlog(path: string, signal?: AbortSignal): Promise<Message[]> {
  const resp = await fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal });
  if (!resp.ok || !resp.body) throw new Error("read " + path + ": " + resp.status);
  const out: Message[] = [];
  await read(resp.body, (m) => out.push(m));
  return out;
}

/** read parses one stream; true when the server said it ended for good. */
async function read(body: ReadableStream<Uint8Array>, emit: (m: Message) => void): Promise<boolean> {
  const reader = body.pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>).getReader();
  let buf = "";
  let m: Message = { event: "message", data: "" };
  let lines: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf += value;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).replace(/\r$/, "");
      buf = buf.slice(i + 1);
      if (line === "") {
        if (lines.length > 0 || m.id !== undefined) {
          m.data = lines.join("\n");
          if (m.event === "end") return true;
          emit(m);
        }
        m = { event: "message", data: "" };
        lines = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const c = line.indexOf(":");
      const field = c < 0 ? line : line.slice(0, c);
      const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
      if (field === "data") lines.push(val);
      else if (field === "event") m.event = val;
      else if (field === "id") m.id = val;
    }
  }
}
