// A session kept current: read once, then read again on each of its
// events (a state change among them), so its badge updates live.
import { useEffect, useState } from "preact/hooks";
import { enc, get } from "../api/client";
import { follow } from "../api/sse";
import type { Session, SessionEvent } from "../api/types";

export function useSession(id?: string, onEvent?: (e: SessionEvent) => void): Session | undefined {
  const [s, setS] = useState<Session>();
  useEffect(() => {
    if (!id) return;
    let alive = true;
    const refresh = () => get<Session>("/v1/sessions/" + enc(id)).then((v) => alive && setS(v), () => undefined);
    refresh();
    const f = follow("/v1/sessions/" + enc(id) + "/events?follow=true", (m) => {
      if (m.event === "state") refresh();
      if (onEvent) {
        try {
          onEvent(JSON.parse(m.data) as SessionEvent);
        } catch {
          /* a malformed event is skipped */
        }
      }
    });
    return () => {
      alive = false;
      f.stop();
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [id]);
  return s;
}
